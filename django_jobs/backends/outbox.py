"""The transactional outbox: enqueues written as OutboxJob rows, sent to Redis after the commit.

- `write(submissions, using)` inserts one row per task in the current transaction: a rollback
  takes the rows with it, so the jobs never existed.
- `OutboxBackend(redis, using).submit(...)` is the fast path, run once the rows have committed
  (by `on_commit.CommitBatch`, one round trip per transaction, or at once outside a transaction):
  in one transaction it claims its rows (`claim`: deletes those no relay has taken), sends their
  tasks through `redis` (the client's Redis backend) and commits. Redis unavailable (or
  refusing): the claim rolls back, the rows stay and each task's state is OUTBOXED; a worker's
  relay sends them.
- `send_rows(rows, using)` is what the relay sends (django_jobs.worker.relay picks the rows):
  oldest id first, one round trip per batch, a row deleted only after Redis accepted its task.
  Sending a row twice leaves one task: the enqueue script refuses an id it has written.
- `hold(row, error)` counts a failed send and puts the row aside for a while, so a row that
  cannot be sent (its queue unknown, Redis refusing its key) never holds up the rows behind it.
- `depth(using)` and `last_relay(using)`: what the admin, the API and the checks show.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, router, transaction
from django.db.models import Count, Min
from django.utils import timezone

from django_jobs.backends.base import Backend, Submission
from django_jobs.broker.factory import get_broker
from django_jobs.broker.protocol import Accepted, EnqueueRequest
from django_jobs.conf.redact import REDACTED
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable, DuplicateJob
from django_jobs.message import SENSITIVE_MARK
from django_jobs.models import OutboxJob, OutboxRelay

logger = logging.getLogger("django_jobs.outbox")

#: The state of a handle whose task waits in the outbox (written, not yet accepted by Redis).
OUTBOXED = "outboxed"
#: Seconds a row whose send failed waits before the next try: doubling from FIRST_HOLD.
FIRST_HOLD = 5.0
MOST_HOLD = 600.0
#: Seconds the fast path leaves new rows to the relay after Redis did not answer it, so that
#: requests do not each wait out ENQUEUE_TIMEOUT through an outage.
SKIP_AFTER_FAILURE = 5.0
#: The clock of that pause (tests move it).
clock = time.monotonic
#: The name of the heartbeat row (OutboxRelay).
RELAY_ROW = "relay"
#: Row ids per claiming DELETE (under every database's limit of query parameters).
CLAIM_CHUNK = 1000


#: The answer for a row left to the relay.
OUTBOX_KEPT = Accepted(OUTBOXED)

#: Whether this code runs inside `use_outbox()`: read by the client itself (`.get()`), so that
#: an enqueue with the outbox off runs no code of this module.
outboxing: ContextVar[bool] = ContextVar("django_jobs_outbox", default=False)


@contextmanager
def use_outbox() -> Iterator[None]:
    """Every enqueue inside goes through the outbox (as with outbox=True): for code that
    enqueues without the keyword, such as send_mail() through the queued backend."""
    token = outboxing.set(True)
    try:
        yield
    finally:
        outboxing.reset(token)


def aliases() -> list[str]:
    """The databases that may hold the outbox table (by the routers)."""
    return [alias for alias in connections if router.allow_migrate_model(alias, OutboxJob)]


def write(submissions: Sequence[Submission], using: str) -> None:
    """Insert one row per submission, on `using`, in the caller's transaction (if any)."""
    OutboxJob.objects.using(using).bulk_create(
        [
            OutboxJob(
                job_id=s.message.id,
                job=s.job.name,
                queue=s.message.queue,
                message=s.encoded,
                options={
                    "delay": s.delay,
                    "eta": s.eta,
                    "idempotency_key": s.message.idempotency_key,
                    "idempotency_window": s.idempotency_window,
                    # The slot its key is in (broker/handoff.py); a row of an earlier release
                    # has none: its queue's.
                    "idempotency_queue": s.job.idempotency_queue(),
                },
            )
            for s in submissions
        ]
    )


class OutboxBackend:
    """The fast path: send committed rows' tasks to Redis, delete the rows Redis accepted."""

    def __init__(self, redis: Backend, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using
        #: The client's Redis backend, which sends the claimed rows' tasks.
        self.redis = redis
        #: After Redis did not answer: which broker, and until when (monotonic) not to try it.
        self.skip: tuple[object, float] | None = None

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        kept = [OUTBOX_KEPT] * len(submissions)
        mine: set[str] = set()
        broker = get_broker()
        if self.skip is not None and self.skip[0] is broker and clock() < self.skip[1]:
            logger.debug("outbox: Redis did not answer lately; left to the relay: %s",
                         _ids(submissions))  # fmt: skip
            return kept
        sent: list[Accepted] | None = None
        try:
            # Claim, send and delete in one transaction: a relay sends none of the rows this
            # claims, and a crash (or Redis failing) rolls the claim back, so the rows stay.
            with transaction.atomic(using=self.using):
                mine = claim([s.message.id for s in submissions], self.using)
                chosen = [s for s in submissions if s.message.id in mine]
                if chosen:
                    sent = self.redis.submit(chosen)
        except BrokerUnavailable as exc:
            if not isinstance(exc, BrokerRefused):
                self.skip = (broker, clock() + SKIP_AFTER_FAILURE)
            logger.warning(
                "outbox: %d job(s) kept in the outbox, to be sent by a worker's relay once "
                "Redis answers (%s): %s; for %gs this process leaves its new jobs to the relay",
                len(submissions), exc, _ids(submissions), SKIP_AFTER_FAILURE,
            )  # fmt: skip
            return kept
        except DatabaseError as exc:
            if sent is None:
                logger.warning("outbox: could not claim the rows (%s): left to the relay", exc)
                return kept
            # Sent, but the delete did not commit: the relay sends them again (one task each).
            logger.warning("outbox: sent, but could not delete the rows (%s): relayed again", exc)
        answers = iter(sent or [])
        # A row the relay took first (a long transaction) is the relay's: "outboxed" here.
        return [next(answers) if s.message.id in mine else OUTBOX_KEPT for s in submissions]


def claim(job_ids: Sequence[str], using: str) -> set[str]:
    """Delete the rows of `job_ids` that no relay has taken or tried, in the caller's
    transaction; the ids deleted, which the caller sends before it commits.

    PostgreSQL: rows a relay has locked are skipped (SKIP LOCKED: no wait). SQLite: the DELETE
    takes the database's write lock, and the relay marks the rows it takes (retry_at) first.
    """
    connection = connections[using]
    meta = OutboxJob._meta
    table, pk = connection.ops.quote_name(meta.db_table), meta.pk.column
    taken: set[str] = set()
    with connection.cursor() as cursor:
        for at in range(0, len(job_ids), CLAIM_CHUNK):
            chunk = list(job_ids[at : at + CLAIM_CHUNK])
            where = f"job_id IN ({', '.join(['%s'] * len(chunk))}) AND retry_at IS NULL"
            if connection.features.has_select_for_update_skip_locked:
                where = f"{pk} IN (SELECT {pk} FROM {table} WHERE {where} FOR UPDATE SKIP LOCKED)"
            cursor.execute(f"DELETE FROM {table} WHERE {where} RETURNING job_id", chunk)
            taken.update(row[0] for row in cursor.fetchall())
    return taken


_backends: dict[str, OutboxBackend] = {}


def backend(using: str, redis: Backend) -> OutboxBackend:
    """The fast path of database `using`, sending through `redis` (the client's Redis backend;
    one object per alias, so that the enqueues of one transaction share one round trip)."""
    found = _backends.get(using)
    if found is None:
        found = _backends[using] = OutboxBackend(redis, using)
    return found


def _ids(submissions: Sequence[Submission]) -> str:
    """The jobs of a fast-path send, for its log lines (built only when a line is written)."""
    return ", ".join(f"{s.job.name} {s.message.id}" for s in submissions)


def _request(row: OutboxJob) -> EnqueueRequest:
    options = row.options
    key = options.get("idempotency_key")
    delay = float(options.get("delay") or 0.0)
    eta = options.get("eta")
    if eta is None and delay > 0:
        # Due `delay` after the enqueue, not after the relay: a due time of its own.
        eta = row.created_at.timestamp() + delay
    home = options.get("idempotency_queue") or row.queue
    idem = None if key is None else get_broker().keys(home).idempotency(row.job, key)
    return EnqueueRequest(
        id=row.job_id,
        queue=row.queue,
        encoded=row.message,
        delay=0.0,
        eta=None if eta is None else float(eta),
        idempotency_key=idem,
        idempotency_window=float(options.get("idempotency_window") or 0.0),
    )


@dataclass(frozen=True)
class Relayed:
    """What one send of rows did."""

    sent: int = 0
    duplicates: int = 0
    held: int = 0


def send_rows(rows: Sequence[OutboxJob], using: str) -> Relayed:
    """Send the rows' tasks in one round trip; delete the rows Redis accepted.

    A duplicate idempotency key is logged with the original's id and its row deleted (the
    original is on its way). Redis refusing the batch: each row is sent alone, and a refused
    one is held (`hold`), but for a Cluster slot on the move (a transient refusal: that row and
    the rest of its queue's are not tried again in this call, and are due again FIRST_HOLD
    later with no attempt counted: each try costs the call's whole budget). BrokerUnavailable
    (Redis did not answer) propagates: every row stays.
    """
    if not rows:
        return Relayed()
    broker = get_broker()
    requests = [_request(row) for row in rows]
    try:
        answers: list[Accepted | None] = list(broker.enqueue(requests))
    except BrokerRefused:
        answers = []
        moving: dict[str, list[int]] = {}  # queue -> rows left for a slot on the move
        for row, request in zip(rows, requests, strict=True):
            if row.queue in moving:  # each try costs the call's whole budget: not another one
                moving[row.queue].append(row.pk)
                answers.append(None)
                continue
            try:
                answers += broker.enqueue([request])
            except BrokerRefused as exc:
                if exc.transient:  # a Cluster slot on the move: soon again, no attempt counted
                    moving[row.queue] = [row.pk]
                    logger.warning(
                        "outbox: %s; the rows of queue %r are sent again in %.0fs", exc,
                        row.queue, FIRST_HOLD,
                    )  # fmt: skip
                else:
                    hold(row, f"Redis refused it: {exc}", using)
                answers.append(None)
        if moving:
            later = timezone.now() + timedelta(seconds=FIRST_HOLD)
            pks = [pk for group in moving.values() for pk in group]
            OutboxJob.objects.using(using).filter(pk__in=pks).update(retry_at=later)
    done, duplicates = [], 0
    for row, accepted in zip(rows, answers, strict=True):
        if accepted is None:
            continue
        if accepted.duplicate_of is not None:
            duplicates += 1
            key = str(row.options.get("idempotency_key"))
            key = REDACTED if SENSITIVE_MARK in row.message else key
            logger.info(
                "outbox: %s; row removed",
                DuplicateJob(row.job, key, accepted.duplicate_of, accepted.duplicate_queue),
            )
        done.append(row.pk)
    OutboxJob.objects.using(using).filter(pk__in=done).delete()
    return Relayed(sent=len(done) - duplicates, duplicates=duplicates, held=len(rows) - len(done))


def hold(row: OutboxJob, error: str, using: str) -> None:
    """Count a failed send of `row`; try it again after a backoff (the rest go on meanwhile)."""
    attempts = row.attempts + 1
    wait = min(MOST_HOLD, FIRST_HOLD * 2 ** min(attempts - 1, 16))
    retry_at = timezone.now() + timedelta(seconds=wait)
    OutboxJob.objects.using(using).filter(pk=row.pk).update(
        attempts=attempts, last_error=error, retry_at=retry_at
    )
    logger.warning(
        "outbox: %s %s not sent (attempt %d): %s; tried again in %.0fs. Fix the cause (the "
        "worker's JOBS['QUEUES'], a deploy of the job's code) or delete the row (OutboxJob "
        "job_id=%s) if the job must not run", row.job, row.job_id, attempts, error, wait,
        row.job_id,
    )  # fmt: skip


@dataclass(frozen=True)
class Depth:
    """The outbox of one database: rows waiting, the oldest one's creation, rows held back."""

    rows: int
    oldest: datetime | None
    held: int

    def oldest_age(self, now: datetime | None = None) -> float | None:
        """Seconds since the oldest row was written (None when the outbox is empty)."""
        if self.oldest is None:
            return None
        return max(0.0, ((now or timezone.now()) - self.oldest).total_seconds())


def depth(using: str = DEFAULT_DB_ALIAS) -> Depth:
    """Rows waiting in the outbox of `using` (one aggregate query)."""
    rows = OutboxJob.objects.using(using)
    found = rows.aggregate(rows=Count("pk"), oldest=Min("created_at"))
    held = rows.filter(attempts__gt=0).count() if found["rows"] else 0
    return Depth(rows=found["rows"], oldest=found["oldest"], held=held)


def last_relay(using: str = DEFAULT_DB_ALIAS) -> OutboxRelay | None:
    """The heartbeat row: which worker relayed last and when (None: no worker ever did)."""
    return OutboxRelay.objects.using(using).filter(name=RELAY_ROW).first()


@dataclass(frozen=True)
class Overview:
    """The outbox at a glance (the admin's Queues page, the API overview, the CLI)."""

    rows: int
    #: Seconds since the oldest row was written (None: empty).
    oldest_age: float | None
    #: Rows whose send failed at least once (they wait for a retry; see `held_error`).
    held: int
    #: The error of the held row tried longest ago, saying what to do ("" when none is held).
    held_error: str
    #: Which worker relayed last and when (None, "": never).
    relayed_at: datetime | None
    relayed_by: str


def overview(using: str = DEFAULT_DB_ALIAS) -> Overview | None:
    """The outbox of `using`, or None when its table cannot be read (not migrated)."""
    try:
        found = depth(using)
        held = OutboxJob.objects.using(using).filter(attempts__gt=0).order_by("pk").first()
        beat = last_relay(using)
    except DatabaseError:
        return None
    return Overview(
        rows=found.rows,
        oldest_age=found.oldest_age(),
        held=found.held,
        held_error="" if held is None else f"{held.job} {held.job_id}: {held.last_error}",
        relayed_at=None if beat is None else beat.relayed_at,
        relayed_by="" if beat is None else beat.worker,
    )
