"""Heartbeat: renew the leases of running tasks and publish this worker in the registry.

Only the supervisor extends leases, not a thread beside the handler: a handler that holds the GIL
in C code cannot make its own task look dead. Leases come first and do not depend on the
registry: a beat that fails (a corrupt registry key, Redis refusing writes) must not leave a
running task to the recoverers. The recoverer renews too, before it recovers anything
(`renew`), so that this worker never recovers, and runs again, a task it is still running.

A flow event's run also holds its call's replay lease: the same tick renews it (beating at
least every JOBS["FLOW_REPLAY_RENEW"]), and a replay whose lease is lost, or whose call was
canceled, is interrupted as a run whose task lease is lost (`on_lost`).

The renewal also answers which renewed runs an operator asked to cancel (the mark cancel.lua
leaves in a running task's record): each is reported once (`on_cancel`), so a cancel reaches a
running task within a heartbeat, without a round trip of its own.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from django_jobs.broker.flows import FlowStore
from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.worker.loop import Component, unreachable

#: A registry entry outlives three missed beats, then disappears.
MISSED_BEATS = 3

#: Called with a running task whose lease was lost, and the seconds since its lease was last
#: renewed (by this worker's clock).
OnLost = Callable[[Delivery, float], None]
#: Called with a running task an operator asked to cancel (once per run).
OnCancel = Callable[[Delivery], None]


class Heartbeat(Component):
    logger = logging.getLogger("django_jobs.worker.heartbeat")

    def __init__(
        self,
        broker: RedisBroker,
        worker_id: str,
        info: dict[str, str | int | float],
        running: Callable[[], Sequence[Delivery]],
        on_lost: OnLost | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_cancel: OnCancel | None = None,
    ) -> None:
        self.broker = broker
        self.worker_id = worker_id
        self.info = info
        self.running = running
        self.on_lost = on_lost
        self.on_cancel = on_cancel
        self.clock = clock
        settings = broker.settings
        self.interval = min(settings.heartbeat_interval, settings.flow_replay_renew)
        self.flows = FlowStore(broker)
        self.flow_queues = frozenset(settings.flow_queues)
        #: Leases not renewed for a lease are lost: the worker cannot go on past that.
        self.give_up_after: float | None = broker.settings.lease
        #: Runs (id, epoch) whose lease was found lost: their outcome will not be written here.
        #: By epoch, not id: a stale and a new run of one task may both be here at once.
        self.lost: set[tuple[str, str]] = set()
        #: Runs (id, epoch) whose cancel was reported.
        self.canceled: set[tuple[str, str]] = set()
        #: When leases were last renewed, all of them (by clock).
        self.renewed_at = clock()

    def tick(self) -> None:
        deliveries = list(self.running())
        try:
            self.renew(deliveries)
        except Exception as exc:
            if unreachable(exc):
                raise  # the beat would wait out the same timeout
            self.beat(deliveries)
            raise
        self.beat(deliveries)

    def failing_for(self, since_a_tick_worked: float) -> float:
        # The leases are what matters: a beat that fails (a corrupt registry key) after they
        # were renewed is no reason to stop.
        return self.clock() - self.renewed_at

    def renew(self, deliveries: Sequence[Delivery] | None = None) -> None:
        """Extend the leases of the tasks this worker runs; report the ones lost.

        Every queue is tried even if one fails (a corrupt lease key of one queue must not cost
        the others their leases), unless Redis is unreachable; the first error is raised after.
        """
        if deliveries is None:
            deliveries = list(self.running())
        by_queue: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in deliveries:
            by_queue[delivery.queue].append(delivery)
        first: Exception | None = None
        for queue, held in by_queue.items():
            try:
                renewal = self.broker.renew_leases(queue, [(d.id, d.epoch) for d in held])
            except Exception as exc:
                if unreachable(exc):
                    raise
                first = first or exc
                continue
            lost, canceled = set(renewal.lost), set(renewal.canceled)
            for delivery in held:
                run = (delivery.id, delivery.epoch)
                if run in lost and run not in self.lost:
                    self.lost.add(run)
                    self._lost(delivery, self.clock() - self.renewed_at)
                elif run in canceled and run not in self.canceled:
                    self.canceled.add(run)
                    self._canceled(delivery)
        replays = [d for d in deliveries if d.queue in self.flow_queues]
        replays = [d for d in replays if (d.id, d.epoch) not in self.lost]
        try:
            for delivery, why in self.flows.renew(replays):
                self.logger.info(
                    "task %s replays a flow call that was %s: interrupting the replay",
                    delivery.id, "canceled" if why == "canceled" else "taken over (lease lost)",
                )  # fmt: skip
                self.lost.add((delivery.id, delivery.epoch))
                self._lost(delivery, self.clock() - self.renewed_at)
        except Exception as exc:
            if unreachable(exc):
                raise
            first = first or exc
        runs = {(d.id, d.epoch) for d in deliveries}
        self.lost &= runs
        self.canceled &= runs
        if first is not None:
            raise first
        self.renewed_at = self.clock()

    def _lost(self, delivery: Delivery, since: float) -> None:
        if self.on_lost is not None:
            self.on_lost(delivery, since)
            return
        self.logger.warning(
            "task %s lost its lease (another worker recovered it): its outcome here will not "
            "be written", delivery.id,
        )  # fmt: skip

    def _canceled(self, delivery: Delivery) -> None:
        if self.on_cancel is not None:
            self.on_cancel(delivery)
            return
        self.logger.warning(
            "task %s was asked to cancel; nothing here can interrupt it: it runs on", delivery.id
        )

    def beat(self, deliveries: Sequence[Delivery]) -> None:
        tasks = json.dumps([{"id": d.id, "queue": d.queue} for d in deliveries])
        self.broker.beat(
            self.worker_id, {**self.info, "tasks": tasks}, self.interval * MISSED_BEATS
        )

    def stop(self) -> None:
        """Remove this worker from the registry."""
        self.broker.unregister(self.worker_id)
