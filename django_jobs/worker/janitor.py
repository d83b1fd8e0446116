"""Janitor: delete completed tasks past their retention and keep the dead set bounded."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_jobs.broker.redis import RedisBroker
from django_jobs.worker.loop import Component

BATCH = 1000


class Janitor(Component):
    logger = logging.getLogger("django_jobs.worker.janitor")

    def __init__(self, broker: RedisBroker, queues: Sequence[str]) -> None:
        self.broker = broker
        self.queues = queues
        self.interval = broker.settings.janitor_interval

    def tick(self) -> None:
        for queue in self.queues:
            while self.broker.janitor(queue, BATCH) >= BATCH:
                pass
