"""Backlog: what the supervisor decided for reaped children but could not write yet.

When Redis does not answer as the supervisor reaps a child (killed for its timeout, or dead on
its own), the policy's decision is kept here and written at the first tick Redis answers, in
order, so the task is retried (or put back, or dead) as decided instead of waiting out its
lease. Each write is guarded by the run's epoch: one that another worker recovered meanwhile
is not ours to write ("elsewhere"). If the worker stops first, its lease puts the task back.
"""

from __future__ import annotations

import logging

from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerRefused
from django_jobs.worker.loop import Component
from django_jobs.worker.policy import Decision
from django_jobs.worker.processor import write_decision


class Backlog(Component):
    logger = logging.getLogger("django_jobs.worker.supervisor")

    def __init__(self, broker: RedisBroker, interval: float = 1.0) -> None:
        self.broker = broker
        self.interval = interval
        #: (delivery, decision, what happened to its run), oldest first.
        self.items: list[tuple[Delivery, Decision, str]] = []

    def add(self, delivery: Delivery, decision: Decision, what: str) -> None:
        self.items.append((delivery, decision, what))

    def tick(self) -> None:
        # Nothing kept: no Redis call at all.
        while self.items:
            delivery, decision, what = self.items[0]
            try:
                state = write_decision(self.broker, delivery, decision)
            except BrokerRefused as exc:
                # Redis answered "no" (a key of ours with the wrong type): trying again will not
                # help, and must not hold up the decisions behind it. Its lease brings it back.
                self.items.pop(0)
                self.logger.warning(
                    "task %s: %s; what becomes of it was refused (%s): its lease expires and a "
                    "recoverer puts it back", delivery.id, what, exc,
                )  # fmt: skip
                continue
            self.items.pop(0)
            self.logger.warning(
                "task %s: %s; now %s (written once Redis answered)",
                delivery.id, what, state or "elsewhere",
            )  # fmt: skip
