"""Relay: send the outbox's rows that the enqueuing process could not send (Redis down, the
process died between its commit and its fast path).

One more component of the supervisor's ticker, like the janitor: each tick sends at most one
batch per database, oldest id first, and while a batch comes back full the next tick comes at
once, so a backlog drains in short steps with the supervisor's own work in between.

- PostgreSQL (any database that has SELECT ... FOR UPDATE SKIP LOCKED): the batch is selected
  FOR UPDATE SKIP LOCKED and sent inside that transaction, so several workers relay at once
  without sending one row twice; each takes the rows the others have not locked.
- SQLite (no row locks): one relay at a time, by a lease in the OutboxRelay row (taken or
  renewed each tick by one UPDATE, lasting LEASE seconds); the batch is marked (retry_at) before
  it is sent, and the fast path leaves marked rows alone; no transaction is held while Redis is
  called, so web requests keep writing meanwhile.
- Rows younger than FRESH seconds are left to their own fast path (it is about to send them):
  to save work only; the fast path's claim is what keeps a row from being sent by both.
- A row is deleted only after Redis accepted its task; sending twice leaves one task.
- A row whose queue is neither in this worker's JOBS["QUEUES"] nor one of the flows' pair, or
  whose job this worker does not know, is held back (attempts counted, the error kept, tried
  again after a backoff) and never holds up the rows behind it.
- Each tick that worked updates the heartbeat row (which worker, when): check W002 warns when
  the outbox is on and no worker has relayed for a while.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import DatabaseError, close_old_connections, connections, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from django_jobs.backends import outbox
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.jobs import registry
from django_jobs.models import OutboxJob, OutboxRelay
from django_jobs.worker.loop import Clock, Component

#: Rows sent per tick and database (one Redis round trip).
BATCH = 500
#: Seconds between two ticks with JOBS["OUTBOX"] on, and off (rows of `outbox=True` enqueues).
INTERVAL = 1.0
IDLE_INTERVAL = 5.0
#: Seconds a row is left to the fast path of the process that wrote it.
FRESH = 1.0
#: Seconds the SQLite relay lease lasts (renewed every tick).
LEASE = 10.0
#: Seconds between two heartbeat writes of a worker that had nothing to relay.
BEAT = 5.0


class Relay(Component):
    logger = logging.getLogger("django_jobs.worker.relay")

    def __init__(
        self,
        broker: RedisBroker,
        worker_id: str,
        *,
        batch: int = BATCH,
        fresh: float = FRESH,
        clock: Clock = time.monotonic,
    ) -> None:
        self.broker = broker
        self.worker_id = worker_id
        self.batch = batch
        self.fresh = fresh
        self.clock = clock
        self.idle_interval = INTERVAL if broker.settings.outbox else IDLE_INTERVAL
        self.interval = self.idle_interval
        #: When each database's heartbeat row was last written (clock seconds).
        self.beat_at: dict[str, float] = {}
        #: The databases whose last tick failed (one log line per change, not one per tick).
        self.db_failing: set[str] = set()
        #: The mark of the rows taken by the last SQLite batch (see `_take`).
        self.taken_until = timezone.now()

    def tick(self) -> None:
        # No database connection is kept between ticks: none may cross the fork of a child.
        close_old_connections()
        full = False
        try:
            for alias in outbox.aliases():
                # One database failing (not migrated, unreachable) does not stop the others.
                try:
                    full = self.relay(alias) or full
                except DatabaseError as exc:
                    self._db_failed(alias, exc)
                else:
                    self._db_works(alias)
        finally:
            connections.close_all()
        self.interval = 0.0 if full else self.idle_interval

    def _db_failed(self, alias: str, exc: DatabaseError) -> None:
        if alias not in self.db_failing:
            self.logger.warning(
                "relaying the outbox of database %r failed: %s (is `manage.py migrate` done? "
                "trying again every %gs)", alias, exc, self.idle_interval,
            )  # fmt: skip
        self.logger.debug("relaying the outbox of %r failed", alias, exc_info=True)
        self.db_failing.add(alias)

    def _db_works(self, alias: str) -> None:
        if alias in self.db_failing:
            self.logger.info("relaying the outbox of database %r works again", alias)
            self.db_failing.discard(alias)

    def relay(self, alias: str) -> bool:
        """Send one batch of `alias`'s outbox; True if it was full (more are waiting)."""
        if connections[alias].features.has_select_for_update_skip_locked:
            with transaction.atomic(using=alias):
                rows = list(self._due(alias).select_for_update(skip_locked=True)[: self.batch])
                sent = self._send(rows, alias)
        else:
            if not self._lease(alias):
                return False
            rows = self._take(list(self._due(alias)[: self.batch]), alias)
            try:
                sent = self._send(rows, alias)
            except BrokerUnavailable:
                # Due again at the next tick, not LEASE later.
                OutboxJob.objects.using(alias).filter(
                    pk__in=[row.pk for row in rows], retry_at=self.taken_until
                ).update(retry_at=None)
                raise
        self._beat(alias, sent)
        return len(rows) >= self.batch

    def _due(self, alias: str) -> QuerySet[OutboxJob]:
        now = timezone.now()
        fresh = now - timedelta(seconds=self.fresh)
        return (
            OutboxJob.objects.using(alias)
            .filter(Q(retry_at__isnull=True, created_at__lte=fresh) | Q(retry_at__lte=now))
            .order_by("pk")
        )

    def _take(self, rows: list[OutboxJob], alias: str) -> list[OutboxJob]:
        """Mark the rows this relay sends (retry_at: LEASE ahead) before sending them, on a
        database without row locks: the fast path leaves a marked row alone, and a row its
        fast path deleted meanwhile is gone from the answer (it is being sent there)."""
        if not rows:
            return rows
        until = self.taken_until = timezone.now() + timedelta(seconds=LEASE)
        picked = OutboxJob.objects.using(alias).filter(pk__in=[row.pk for row in rows])
        picked.update(retry_at=until)
        marked = set(picked.filter(retry_at=until).values_list("pk", flat=True))
        return [row for row in rows if row.pk in marked]

    def _send(self, rows: list[OutboxJob], alias: str) -> int:
        # JOBS["QUEUES"] and the flows' pair (flows enqueue their events like jobs).
        known = self.broker.settings.served_queues
        good = []
        for row in rows:
            if row.queue not in known:
                outbox.hold(
                    row, f"queue {row.queue!r} is not in JOBS['QUEUES'] of worker "
                    f"{self.worker_id} ({', '.join(known)})", alias,
                )  # fmt: skip
            elif row.job not in registry.jobs:
                outbox.hold(
                    row, f"job type {row.job!r} is unknown to worker {self.worker_id}: is its "
                    f"code up to date?", alias,
                )  # fmt: skip
            else:
                good.append(row)
        done = outbox.send_rows(good, alias)
        if done.sent or done.duplicates:
            self.logger.info(
                "relayed %d job(s) from the outbox of %r (%d duplicate(s) removed)",
                done.sent, alias, done.duplicates,
            )  # fmt: skip
        return done.sent

    def _lease(self, alias: str) -> bool:
        """Take or renew the single-relay lease of `alias` (databases without row locks)."""
        now = timezone.now()
        rows = OutboxRelay.objects.using(alias)
        free = Q(holder=self.worker_id) | Q(holder="") | Q(lease_until__lt=now)
        until = now + timedelta(seconds=LEASE)
        taken = rows.filter(free, name=outbox.RELAY_ROW).update(
            holder=self.worker_id, lease_until=until
        )
        if not taken and not rows.filter(name=outbox.RELAY_ROW).exists():
            _, taken = rows.get_or_create(
                name=outbox.RELAY_ROW, defaults={"holder": self.worker_id, "lease_until": until}
            )
        return bool(taken)

    def stop(self) -> None:
        """Give back the single-relay lease (a graceful stop): another worker relays at its next
        tick, not LEASE seconds later. A database that fails keeps it until it expires."""
        try:
            for alias in outbox.aliases():
                if connections[alias].features.has_select_for_update_skip_locked:
                    continue  # row locks: no lease
                try:
                    OutboxRelay.objects.using(alias).filter(
                        name=outbox.RELAY_ROW, holder=self.worker_id
                    ).update(holder="", lease_until=None)
                except DatabaseError as exc:
                    self.logger.debug("could not give back the relay lease of %r: %s", alias, exc)
        finally:
            connections.close_all()

    def _beat(self, alias: str, sent: int) -> None:
        """Write the heartbeat row: now, after work, or BEAT seconds after the last write."""
        if not sent and self.clock() - self.beat_at.get(alias, -BEAT) < BEAT:
            return
        fields = {"worker": self.worker_id, "relayed_at": timezone.now(), "sent": sent}
        rows = OutboxRelay.objects.using(alias)
        if not rows.filter(name=outbox.RELAY_ROW).update(**fields):
            rows.update_or_create(name=outbox.RELAY_ROW, defaults=fields)
        self.beat_at[alias] = self.clock()
