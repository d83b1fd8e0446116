"""Recoverer: hand back the tasks of workers that died (their lease expired).

Before it recovers anything it has this worker renew the leases of the tasks it runs (`renew`,
the heartbeat's): after an outage longer than the lease, this worker's own running tasks have
expired leases too, and recovering them would hand them to another of its children while they
still run. If the renewal fails, nothing is recovered.

It also finishes the enqueues their callers left half-way (a hand-off: broker/handoff.py) in the
slot of every queue an idempotency key may live in, served here or not: any worker finishes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django_jobs.broker import handoff
from django_jobs.broker.redis import RedisBroker
from django_jobs.broker.shards import shards_for
from django_jobs.jobs import registry
from django_jobs.keys import queue_label
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
                        task_id, queue_label(queue), state,
                    )  # fmt: skip
                if len(recovered) < BATCH:
                    break
        homes = {*self.broker.settings.known_queues}
        homes.update(job.idempotency_queue() for job in registry.jobs.values())
        # A sharded home keeps its keys' hand-offs in the shard each key hashes to (keys.py).
        for home in shards_for(self.broker.settings).expand(sorted(homes)):
            while self.broker.finish_handoffs(home) >= handoff.BATCH:
                pass
