"""The calls of the worker's background loops (the supervisor's side, never a child's task):
forward due tasks, recover expired leases, the janitor, and the worker registry (beat,
unregister). RedisBroker (redis.py) is built on them. The heartbeat renews leases with
`renew_leases` (cancel.py's, worker/heartbeat.py); `extend_leases` here is the older form of it
that answers only the runs lost, kept for the Broker protocol (protocol.py): nothing in
django_jobs calls it, only tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_jobs.broker.connection import ScriptCalls
from django_jobs.broker.protocol import Renewal, Requeued
from django_jobs.keys import worker, workers


class SweepCalls(ScriptCalls):
    """Forward, recover, janitor, beat, unregister and extend_leases (see the module)."""

    def renew_leases(self, queue: str, held: Sequence[tuple[str, str]]) -> Renewal:
        raise NotImplementedError  # CancelCalls' (cancel.py)

    def forward(self, queue: str, limit: int = 1000) -> int:
        """Move due scheduled and retry tasks to pending; return how many moved."""
        k = self.keys(queue)
        keys = [k.scheduled, k.retry, k.pending, k.wake, k.guard]
        return int(self._run("forward", keys, [k.task_prefix, limit]))

    def recover(self, queue: str, limit: int = 1000) -> list[tuple[str, Requeued]]:
        """Hand back tasks whose lease expired; return (id, new state) pairs."""
        k = self.keys(queue)
        keys = [k.lease, k.active, k.pending, k.dead, k.wake, k.guard]
        args = [k.task_prefix, self.settings.max_crashes, limit, self.settings.retention]
        flat = self._run("recover", keys, args)
        return [
            (task_id, Requeued(state)) for task_id, state in zip(flat[::2], flat[1::2], strict=True)
        ]

    def janitor(self, queue: str, limit: int = 1000) -> int:
        """Delete expired completed and canceled tasks and trim the dead set; return how many
        were deleted."""
        k = self.keys(queue)
        args = [k.task_prefix, self.settings.dead_max_tasks, self.settings.dead_max_age, limit]
        return int(self._run("janitor", [k.completed, k.dead, k.canceled, k.guard], args))

    def beat(self, worker_id: str, info: dict[str, str | int | float], ttl: float) -> None:
        """Publish a worker in the registry for ttl seconds (renewed by the next beat)."""
        namespace = self.settings.namespace
        args: list[Any] = [worker_id, max(1, round(ttl))]
        for name, value in info.items():
            args += [name, value]
        keys = [workers(namespace), worker(namespace, worker_id)]
        self._run("beat", keys, args)

    def unregister(self, worker_id: str) -> None:
        """Remove a worker from the registry (a stopping worker's last call)."""
        namespace = self.settings.namespace
        with self.unavailable():
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(worker(namespace, worker_id))
            pipe.zrem(workers(namespace), worker_id)
            pipe.execute()

    def extend_leases(self, queue: str, held: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """Renew the leases of (id, epoch) pairs; return the pairs whose lease is lost (the
        runs asked to cancel too: `renew_leases`)."""
        return self.renew_leases(queue, held).lost
