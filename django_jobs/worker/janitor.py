"""Janitor: delete completed tasks past their retention, keep the dead set bounded, prune the
processed-tasks table, and say when Redis evicted keys.

It runs in the supervisor's loop, so each tick must stay short: pruning deletes at most one
bounded batch per database per tick. While a batch comes back full (a backlog), the next tick
comes after `CATCH_UP` seconds instead of the janitor interval, so a backlog drains in short
steps with the supervisor's own work in between. The Redis purge keeps its own interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from django.db import DatabaseError, close_old_connections, connections

from django_jobs.broker.redis import RedisBroker
from django_jobs.idempotency import prune_aliases, prune_batch
from django_jobs.worker.banner import evictions
from django_jobs.worker.loop import Clock, Component

BATCH = 1000
#: ProcessedTask rows pruned per tick and database: on PostgreSQL about 30 ms (1,000,000 rows
#: drain in about 17 minutes of one batch a second), short enough for the supervisor's loop.
PRUNE_SIZE = 1000
#: Seconds between two pruning batches while a backlog drains.
CATCH_UP = 1.0


class Janitor(Component):
    logger = logging.getLogger("django_jobs.worker.janitor")

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str],
        *,
        clock: Clock = time.monotonic,
        prune_size: int = PRUNE_SIZE,
    ) -> None:
        self.broker = broker
        self.queues = queues
        self.clock = clock
        self.prune_size = prune_size
        self.interval = broker.settings.janitor_interval
        self.redis_due = clock()
        #: Whether the last pruning failed (one log line per change, not one per tick).
        self.prune_failing = False
        #: Redis' count of evicted keys at the last look (None: not looked yet).
        self.evicted: int | None = None

    def tick(self) -> None:
        # The database first: a Redis outage (which ends this tick) does not stop pruning.
        backlog = self.prune()
        self.interval = CATCH_UP if backlog else self.broker.settings.janitor_interval
        if self.clock() >= self.redis_due:
            self.report_evictions()  # first: a read, answered under maxmemory too
            for queue in self.queues:
                while self.broker.janitor(queue, BATCH) >= BATCH:
                    pass
            self.redis_due = self.clock() + self.broker.settings.janitor_interval

    def report_evictions(self) -> None:
        """Say how many keys Redis evicted since the last look: any of them may have been a
        task's record or a queue's list, so tasks may be lost or stranded (a record whose id
        a worker meets is filed dead as "record evicted"; nothing finds a record whose list went).
        """
        with self.broker.unavailable(writes=False):
            seen = evictions(self.broker.client)
        if seen is None:
            return
        count, policy = seen
        since = "since this worker last looked" if self.evicted is not None else "since it started"
        if self.evicted is None or count < self.evicted:  # first look, or a restarted Redis
            self.evicted = 0
        if count > self.evicted:
            self.logger.error(
                "Redis evicted %d key(s) %s (maxmemory-policy %s): task records and queue lists "
                "of django-jobs may be among them, so tasks may be lost or stranded. Set "
                "'maxmemory-policy noeviction' for the jobs Redis.",
                count - self.evicted, since, policy,
            )  # fmt: skip
        self.evicted = count

    def prune(self) -> bool:
        """Delete one batch of expired ProcessedTask rows per database; True if one was full."""
        backlog = False
        # The supervisor holds no database connection between ticks (none may cross the fork
        # of a new child) and never reuses a broken one.
        close_old_connections()
        try:
            for alias in prune_aliases():
                deleted = prune_batch(batch_size=self.prune_size, using=alias)
                if deleted:
                    self.logger.debug("pruned %d processed tasks from %r", deleted, alias)
                backlog = backlog or deleted >= self.prune_size
        except DatabaseError as exc:
            if not self.prune_failing:
                self.logger.warning(
                    "pruning processed tasks failed: %s (is `manage.py migrate` done? trying "
                    "again every %gs)", exc, self.broker.settings.janitor_interval,
                )  # fmt: skip
            self.logger.debug("pruning processed tasks failed", exc_info=True)
            self.prune_failing = True
            return False
        finally:
            connections.close_all()
        if self.prune_failing:
            self.logger.info("pruning processed tasks works again")
            self.prune_failing = False
        return backlog
