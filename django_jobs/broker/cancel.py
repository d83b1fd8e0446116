"""Cancel on one Redis broker: the operator's cancel, the end of a canceled run, and the lease
renewal that tells a worker which of its runs were asked to stop.

A cancel (cancel.lua) of a task waiting to run files it as canceled at once. One of a running
task marks its record (`cancel_requested_at`): the mark survives whichever worker runs the task,
and costs no round trip of its own, since the supervisor's heartbeat renews the run's lease
with extend_lease, which answers the runs marked beside the runs lost (`renew_leases`). The run
is interrupted with JobCanceled (worker/canceling.py) and ends with `end_canceled`, under the
run's epoch like every outcome. The canceled set is the janitor's, like completed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django_jobs.broker.connection import ScriptCalls
from django_jobs.broker.protocol import (
    Action,
    Cancellation,
    CancelOutcome,
    Delivery,
    Renewal,
    Verdict,
)


def _pairs(flat: Sequence[str]) -> list[tuple[str, str]]:
    return list(zip(flat[::2], flat[1::2], strict=True))


class CancelCalls(ScriptCalls):
    """The cancel scripts of one Redis broker (RedisBroker's)."""

    def cancel(self, queue: str, task_id: str) -> Cancellation:
        """Cancel a task of queue: see cancel.lua and CancelOutcome."""
        keys, args = self._cancel_keys(queue, task_id, uuid.uuid4().hex)
        what, state = (str(part) for part in self._run("cancel", keys, args))
        outcome = CancelOutcome.NOT_FOUND if what == "gone" else CancelOutcome(what)
        return Cancellation(outcome, state)

    def _cancel_keys(self, queue: str, task_id: str, token: str) -> tuple[list[str], list[Any]]:
        """cancel.lua's keys and arguments for one call (`token`: any unique string)."""
        k = self.keys(queue)
        keys = [k.task(task_id), k.pending, k.scheduled, k.retry, k.canceled,
                k.cancel_request(token)]  # fmt: skip
        return keys, [task_id, self.settings.retention, token]

    def end_canceled(self, delivery: Delivery, error: str, traceback: str) -> bool:
        """File a run that stopped for its cancel as canceled; False if the delivery is stale."""
        verdict = Verdict(delivery.id, delivery.queue, delivery.epoch, "", Action.CANCEL,
                          error=error, traceback=traceback)  # fmt: skip
        _name, keys, args = self._cancel_call(verdict)
        return bool(self._run("end_canceled", keys, args))

    def _cancel_call(self, verdict: Verdict) -> tuple[str, list[str], list[Any]]:
        """end_canceled's keys and arguments for a verdict (RedisBroker._verdict_call's)."""
        k = self.keys(verdict.queue)
        keys = [k.task(verdict.task_id), k.active, k.lease, k.canceled, k.guard]
        args = [verdict.task_id, verdict.epoch, self.settings.retention, verdict.error,
                verdict.traceback]  # fmt: skip
        return "end_canceled", keys, args

    def renew_leases(self, queue: str, held: Sequence[tuple[str, str]]) -> Renewal:
        """Renew the leases of (id, epoch) pairs; answer the runs lost and those whose task was
        asked to cancel, in the one round trip of extend_lease."""
        if not held:
            return Renewal([], [])
        k = self.keys(queue)
        args: list[Any] = [k.task_prefix, self.settings.lease]
        for task_id, epoch in held:
            args += [task_id, epoch]
        lost, canceled = self._run("extend_lease", [k.lease, k.guard], args)
        return Renewal(_pairs(lost), _pairs(canceled))
