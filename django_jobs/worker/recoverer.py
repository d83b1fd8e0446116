"""Recoverer: hand back the tasks of workers that died (their lease expired).

Before it recovers anything it has this worker renew the leases of the tasks it runs (`renew`,
the heartbeat's): after an outage longer than the lease, this worker's own running tasks have
expired leases too, and recovering them would hand them to another of its children while they
still run. If the renewal fails, nothing is recovered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django_jobs.broker.redis import RedisBroker
from django_jobs.worker.loop import Component

BATCH = 1000


class Recoverer(Component):
    logger = logging.getLogger("django_jobs.worker.recoverer")

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str],
        renew: Callable[[], None] = lambda: None,
    ) -> None:
        self.broker = broker
        self.queues = queues
        self.renew = renew
        self.interval = broker.settings.recoverer_interval

    def tick(self) -> None:
        self.renew()
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
