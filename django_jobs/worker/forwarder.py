"""Forwarder: move due scheduled and retry tasks to pending."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_jobs.broker.redis import RedisBroker
from django_jobs.worker.loop import Component

#: Tasks moved per script call; a larger backlog takes more calls in the same tick.
BATCH = 1000


class Forwarder(Component):
    logger = logging.getLogger("django_jobs.worker.forwarder")

    def __init__(self, broker: RedisBroker, queues: Sequence[str]) -> None:
        self.broker = broker
        self.queues = queues
        self.interval = broker.settings.forwarder_interval

    def tick(self) -> None:
        for queue in self.queues:
            # forward() moves up to BATCH from each of scheduled and retry.
            while self.broker.forward(queue, BATCH) >= BATCH:
                pass
