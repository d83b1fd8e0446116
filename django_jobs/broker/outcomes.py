"""The single-outcome writes of RedisBroker: one run's outcome in a call of its own (write, ack,
retry, kill, requeue), for the supervisor and the inline modes. A worker child writes its
outcomes with its next fetch instead (`RedisBroker.settle`, whose script calls `_verdict_call`
builds), so none of this runs on its hot path."""

from __future__ import annotations

from typing import Any

from django_jobs.broker.connection import ScriptCalls
from django_jobs.broker.protocol import Action, Delivery, Requeued, Verdict

Call = tuple[str, list[str], list[Any]]


def _verdict(delivery: Delivery, action: str, **fields: Any) -> Verdict:
    return Verdict(delivery.id, delivery.queue, delivery.epoch, "", Action(action), **fields)


class OutcomeCalls(ScriptCalls):
    """Write, ack, retry, kill and requeue (see the module)."""

    def _verdict_call(self, verdict: Verdict) -> Call:
        raise NotImplementedError  # RedisBroker's (settle's hot path)

    def write(self, verdict: Verdict) -> bool:
        """Write one run's outcome; False if it is stale (nothing changed)."""
        name, keys, args = self._verdict_call(verdict)
        return bool(self._run(name, keys, args))

    def ack(self, delivery: Delivery, retention: float) -> bool:
        """Mark the task completed; False if the delivery is stale (nothing changed)."""
        return self.write(_verdict(delivery, "ack", retention=retention))

    def retry(
        self,
        delivery: Delivery,
        delay: float,
        error: str,
        traceback: str,
        *,
        spend: bool = True,
        unknown: bool = False,
    ) -> bool:
        """Schedule another run after delay seconds; False if the delivery is stale."""
        verdict = _verdict(delivery, "retry", delay=delay, error=error, traceback=traceback,
                           spend=spend, unknown=unknown)  # fmt: skip
        return self.write(verdict)

    def kill(self, delivery: Delivery, error: str, traceback: str, *, spend: bool = True) -> bool:
        """Move the task to dead with its error; False if the delivery is stale."""
        verdict = _verdict(delivery, "kill", error=error, traceback=traceback, spend=spend)
        return self.write(verdict)

    def requeue(self, delivery: Delivery, *, crash: bool, reason: str = "") -> Requeued | None:
        """Put an active task back in pending without spending an attempt.

        Returns where it went (dead: a crash past the budget), or None if the delivery is stale.
        """
        reply = self._run(*self._requeue_call(delivery, crash, reason))
        return Requeued(reply) if reply else None

    def _requeue_call(self, delivery: Delivery, crash: bool, reason: str) -> Call:
        k = self.keys(delivery.queue)
        keys = [k.task(delivery.id), k.active, k.lease, k.pending, k.dead, k.wake, k.guard]
        args = [delivery.id, delivery.epoch, int(crash), self.settings.max_crashes, reason,
                self.settings.retention]  # fmt: skip
        return "requeue", keys, args
