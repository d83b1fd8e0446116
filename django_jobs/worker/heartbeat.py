"""Heartbeat: renew the leases of running tasks and publish this worker in the registry.

Only the heartbeat extends leases, and it runs in the supervisor, not beside the handler: a
handler that holds the GIL in C code cannot make its own task look dead.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

from django_jobs import keys
from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.worker.loop import Component

#: A registry entry outlives three missed beats, then disappears.
MISSED_BEATS = 3


class Heartbeat(Component):
    logger = logging.getLogger("django_jobs.worker.heartbeat")

    def __init__(
        self,
        broker: RedisBroker,
        worker_id: str,
        info: dict[str, str | int | float],
        running: Callable[[], Sequence[Delivery]],
    ) -> None:
        self.broker = broker
        self.worker_id = worker_id
        self.info = info
        self.running = running
        self.interval = broker.settings.heartbeat_interval
        #: Ids whose lease was found lost: their outcome will not be written by this worker.
        self.lost: set[str] = set()

    def tick(self) -> None:
        deliveries = list(self.running())
        self.beat(deliveries)
        self.extend(deliveries)

    def extend(self, deliveries: Sequence[Delivery]) -> None:
        by_queue: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for delivery in deliveries:
            by_queue[delivery.queue].append((delivery.id, delivery.epoch))
        for queue, held in by_queue.items():
            for task_id in self.broker.extend_leases(queue, held):
                if task_id not in self.lost:
                    self.lost.add(task_id)
                    self.logger.warning(
                        "task %s lost its lease (recovered by another worker); its outcome "
                        "here will not be written", task_id,
                    )  # fmt: skip
        self.lost &= {d.id for d in deliveries}

    def beat(self, deliveries: Sequence[Delivery]) -> None:
        tasks = json.dumps([{"id": d.id, "queue": d.queue} for d in deliveries])
        self.broker.beat(
            self.worker_id, {**self.info, "tasks": tasks}, self.interval * MISSED_BEATS
        )

    def stop(self) -> None:
        """Remove this worker from the registry."""
        namespace = self.broker.settings.namespace
        pipe = self.broker.client.pipeline(transaction=False)
        pipe.delete(keys.worker(namespace, self.worker_id))
        pipe.zrem(keys.workers(namespace), self.worker_id)
        with self.broker.unavailable():
            pipe.execute()
