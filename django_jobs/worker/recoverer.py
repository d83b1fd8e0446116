"""Recoverer: hand back the tasks of workers that died (their lease expired)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_jobs.broker.redis import RedisBroker
from django_jobs.worker.loop import Component

BATCH = 1000


class Recoverer(Component):
    logger = logging.getLogger("django_jobs.worker.recoverer")

    def __init__(self, broker: RedisBroker, queues: Sequence[str]) -> None:
        self.broker = broker
        self.queues = queues
        self.interval = broker.settings.recoverer_interval

    def tick(self) -> None:
        for queue in self.queues:
            while True:
                recovered = self.broker.recover(queue, BATCH)
                for task_id, state in recovered:
                    self.logger.warning(
                        "task %s on %s: its worker died (lease expired); now %s",
                        task_id, queue, state,
                    )  # fmt: skip
                if len(recovered) < BATCH:
                    break
