"""Enqueueing: validate, resolve defaults, hand the tasks to a backend, return handles.

The backend is the settings': Redis (`RedisBackend`, the client's own: an enqueue runs no code
of backends/), or with REDIS_URL unset the WHEN_DISABLED mode's (backends/), unless a test helper
has put one in its place with `override_backend` (django_jobs.testing does).

On-commit enqueues (`on_commit=True`, or JOBS["ENQUEUE_ON_COMMIT"] inside atomic()) wait for
their transaction in one batch per transaction and database alias, sent in one round trip when
it commits; see django_jobs.on_commit.

Outboxed enqueues (`outbox=True`, JOBS["OUTBOX"], `use_outbox()`) write OutboxJob rows in the
caller's transaction and send them after the commit through the same batch (the fast path is
backends/outbox.py); a worker's relay sends what it could not. Flows get it through `enqueue`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.transaction import TransactionManagementError

from django_jobs import tracing
from django_jobs.backends import outbox as outbox_rows
from django_jobs.backends.base import Backend, Submission
from django_jobs.backends.inline import InlineBackend
from django_jobs.backends.outbox import use_outbox as use_outbox
from django_jobs.backends.skip import SkipBackend
from django_jobs.broker.factory import get_broker as get_broker
from django_jobs.broker.protocol import Accepted, EnqueueRequest
from django_jobs.broker.redis import RedisBroker
from django_jobs.canceling import TaskCalls
from django_jobs.conf import JobsSettings, get_settings, to_seconds
from django_jobs.exceptions import (
    DuplicateJob,
    JobsDisabled,
    PayloadTooLarge,
    UnknownQueue,
)
from django_jobs.message import Message, encode, payload_to_json
from django_jobs.on_commit import CommitBatch

if TYPE_CHECKING:
    from django_jobs.jobs import Job

logger = logging.getLogger("django_jobs.client")

#: The state of a handle whose enqueue waits for its transaction to commit.
DEFERRED = "deferred"
#: The state of a handle whose task waits in the outbox (written, not yet accepted by Redis).
OUTBOXED = outbox_rows.OUTBOXED

#: Most tasks written in one round trip.
BATCH_SIZE = 500


class RedisBackend:
    """Into Redis, for the workers: one round trip per batch of up to BATCH_SIZE tasks, through
    the process's broker (`get_broker`), kept while the settings it was built for are the
    current ones (a new JOBS, as `override_settings` makes, gets its own)."""

    def __init__(self) -> None:
        self.broker: RedisBroker | None = None

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        broker = self.broker
        if broker is None or broker.settings is not get_settings():
            broker = self.broker = get_broker()
        if 0 < len(submissions) <= BATCH_SIZE:  # one round trip: every single enqueue
            return broker.enqueue([_request(broker, s) for s in submissions])
        accepted: list[Accepted] = []
        for start in range(0, len(submissions), BATCH_SIZE):
            batch = submissions[start : start + BATCH_SIZE]
            accepted += broker.enqueue([_request(broker, s) for s in batch])
        return accepted


def _request(broker: RedisBroker, s: Submission) -> EnqueueRequest:
    """A submission as the broker takes it."""
    message, key = s.message, s.message.idempotency_key
    if key is not None:  # in the job type's home queue's slot (broker/handoff.py)
        key = broker.keys(s.job.idempotency_queue()).idempotency(s.job.name, key)
    return EnqueueRequest(
        message.id, message.queue, s.encoded, s.delay, s.eta, key, s.idempotency_window
    )


_backends: dict[str, Backend] = {
    "redis": RedisBackend(),
    "inline": InlineBackend(),
    "skip": SkipBackend(),
}
#: The backend every enqueue goes to instead of the settings' one (see override_backend).
_override: Backend | None = None


@contextmanager
def override_backend(backend: Backend) -> Iterator[Backend]:
    """Send every enqueue inside the block to `backend`, whatever JOBS says (test helpers)."""
    global _override
    saved, _override = _override, backend
    try:
        yield backend
    finally:
        _override = saved


def outbox_wanted(outbox: bool | None, settings: JobsSettings) -> bool:
    """Whether an enqueue goes through the outbox: the keyword, else `use_outbox()` or
    JOBS["OUTBOX"]; never with jobs disabled or a test backend (django_jobs.testing) in place."""
    if outbox is None:
        outbox = settings.outbox or outbox_rows.outboxing.get()
    return outbox and settings.enabled and _override is None


def backend_for(settings: JobsSettings) -> Backend:
    """The backend enqueues go to: the override, Redis, or the WHEN_DISABLED mode's."""
    if _override is not None:
        return _override
    if settings.enabled:
        return _backends["redis"]
    if settings.when_disabled == "raise":
        raise JobsDisabled()
    return _backends[settings.when_disabled]


@dataclass
class JobHandle(TaskCalls):
    """An enqueued job: its id, where it went, and its state when enqueue returned; `refresh()`
    reads its state now, `cancel()` cancels it (django_jobs.canceling).

    `state` is a task state ("pending", "scheduled"), "deferred" until the transaction of an
    on-commit enqueue commits (then the state it was accepted in), "outboxed" while its task
    waits in the outbox, or with Redis disabled: "completed", "dead" (inline) or "skipped".
    """

    id: str
    job: str
    queue: str
    state: str


@dataclass(frozen=True)
class Options:
    """Per-enqueue overrides; None means the job's default, which falls back to JOBS."""

    queue: str | None = None
    delay: timedelta | float | None = None
    eta: datetime | None = None
    max_attempts: int | None = None
    timeout: timedelta | float | None = None
    retention: timedelta | float | None = None
    idempotency_window: timedelta | float | None = None

    @classmethod
    def of(
        cls,
        queue: str | None = None,
        delay: timedelta | float | None = None,
        eta: datetime | None = None,
        max_attempts: int | None = None,
        timeout: timedelta | float | None = None,
        retention: timedelta | float | None = None,
        idempotency_window: timedelta | float | None = None,
    ) -> Options:
        """The Options of an enqueue's keywords: NO_OPTIONS when none is given (the usual call,
        whose defaults `resolve` keeps per job class)."""
        if (
            queue is None
            and delay is None
            and eta is None
            and max_attempts is None
            and timeout is None
            and retention is None
            and idempotency_window is None
        ):
            return NO_OPTIONS
        return cls(queue, delay, eta, max_attempts, timeout, retention, idempotency_window)


@dataclass(frozen=True)
class Resolved:
    """Options with every default applied, checked, in seconds."""

    queue: str
    delay: float
    eta: float | None
    max_attempts: int
    timeout: float
    retention: float
    idempotency_window: float


#: An enqueue that overrides nothing (`Options.of()`): what it resolves to is kept per job class.
NO_OPTIONS = Options()


def _pick(*values: timedelta | float | None) -> float:
    """The first value that is set (None and 0 mean "not set"), in seconds."""
    for value in values:
        if value is not None and to_seconds(value) != 0:
            return to_seconds(value)
    return 0.0


#: What `NO_OPTIONS` resolved to, by the job class and the class's own defaults, with the
#: settings it was resolved under: a new JOBS (`get_settings()` is a new object after Django's
#: setting_changed, as `override_settings` sends) or a changed class attribute resolves again.
_defaults: dict[tuple[Any, ...], tuple[JobsSettings, Resolved]] = {}
#: Entries kept at most (then it starts again): one per job class and set of class defaults.
MOST_DEFAULTS = 1024


def resolve(job: type[Job[Any]], options: Options, settings: JobsSettings) -> Resolved:
    """Apply defaults (enqueue option, then job class, then JOBS) and check the result.

    Zero or None means "the default", except for retention, where 0 means "keep nothing".
    With `NO_OPTIONS` (an enqueue that overrides nothing) the job's defaults are resolved once
    per job class and settings, not per call.
    """
    if options is not NO_OPTIONS:
        return _resolve(job, options, settings)
    # default_queue() is called once each time (a hook may read anything: EMAIL_QUEUE does),
    # and its answer is the one used. Types are in the key: 3.0 is == 3, but not a whole number.
    queue = job.default_queue()
    values = (job.max_attempts, job.timeout, job.retention, job.idempotency_window)
    key = (job, queue, *values, *map(type, values))
    try:
        cached = _defaults.get(key)
    except TypeError:  # an unhashable class attribute: resolve refuses it
        return _resolve(job, options, settings, queue)
    if cached is not None and cached[0] is settings:
        return cached[1]
    resolved = _resolve(job, options, settings, queue)
    if len(_defaults) >= MOST_DEFAULTS:
        _defaults.clear()
    _defaults[key] = (settings, resolved)
    return resolved


def _resolve(
    job: type[Job[Any]], options: Options, settings: JobsSettings, default: str | None = None
) -> Resolved:
    """resolve's work; `default` is the job's default_queue() when the caller asked it."""
    queue = options.queue or default or job.default_queue()
    if queue not in settings.queues and queue not in settings.flow_queues:
        raise UnknownQueue(queue, settings.queues)
    if options.delay is not None and options.eta is not None:
        raise TypeError("give delay or eta, not both")
    eta = None
    if options.eta is not None:
        if options.eta.tzinfo is None:
            raise ValueError("eta must be timezone-aware (use django.utils.timezone.now() + ...)")
        eta = options.eta.timestamp()
    retention = next(
        (to_seconds(v) for v in (options.retention, job.retention) if v is not None),
        settings.retention,
    )
    resolved = Resolved(
        queue=queue,
        delay=to_seconds(options.delay) if options.delay is not None else 0.0,
        eta=eta,
        max_attempts=options.max_attempts or job.max_attempts or settings.max_attempts,
        timeout=_pick(options.timeout, job.timeout, settings.timeout),
        retention=retention,
        idempotency_window=_pick(
            options.idempotency_window, job.idempotency_window, settings.idempotency_window
        ),
    )
    for name in ("delay", "timeout", "retention", "idempotency_window"):
        if getattr(resolved, name) < 0:
            raise ValueError(f"{name} must not be negative, got {getattr(resolved, name)}")
    if not isinstance(resolved.max_attempts, int) or resolved.max_attempts < 1:
        raise ValueError(f"max_attempts must be a whole number, 1 or more: {resolved.max_attempts}")
    return resolved


def enqueue(
    job: type[Job[Any]],
    items: Sequence[tuple[Any, str | None]],
    options: Options,
    *,
    on_commit: bool | None = None,
    using: str | None = None,
    outbox: bool | None = None,
) -> list[JobHandle]:
    """Validate every (payload, idempotency key) and enqueue them; see Job.enqueue.

    on_commit None: JOBS["ENQUEUE_ON_COMMIT"] decides, for an enqueue inside atomic() on the
    database `using` (default: the default database). outbox None: JOBS["OUTBOX"] (or
    `use_outbox()`) decides; see `enqueue_outboxed`. Traced: see django_jobs.tracing.
    """
    if tracing.tracer is None:
        return _enqueue(job, items, options, on_commit, using, outbox)
    with tracing.enqueuing(job.name, len(items)):
        return _enqueue(job, items, options, on_commit, using, outbox)


def _enqueue(job: type[Job[Any]], items: Sequence[tuple[Any, str | None]], options: Options,
             on_commit: bool | None, using: str | None, outbox: bool | None,
             ) -> list[JobHandle]:  # fmt: skip
    settings = get_settings()
    resolved = resolve(job, options, settings)
    submissions = []
    for payload, key in items:
        data = payload_to_json(payload, job.payload_type, job.sensitive)
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError(f"idempotency_key must be a non-empty str, got {key!r}")
        message = Message(
            # 32 lowercase hex digits of 128 random bits, as uuid4().hex, in a fifth of its time
            id=os.urandom(16).hex(),
            job=job.name,
            queue=resolved.queue,
            payload=data,
            max_attempts=resolved.max_attempts,
            timeout=resolved.timeout,
            retention=resolved.retention,
            idempotency_key=key,
            trace=None if tracing.tracer is None else tracing.carrier(),
            sensitive=job.sensitive,
        )
        encoded = encode(message)
        size = len(encoded.encode())
        if size > settings.max_payload_bytes:
            raise PayloadTooLarge(size, settings.max_payload_bytes)
        submissions.append(
            Submission(
                job, message, encoded, resolved.delay, resolved.eta, resolved.idempotency_window
            )
        )
    if outbox_wanted(outbox, settings):
        return enqueue_outboxed(job, submissions, using or DEFAULT_DB_ALIAS)
    backend = backend_for(settings)
    # The connection is looked up only for an on-commit enqueue (the lookup is not free).
    if on_commit is None and settings.enqueue_on_commit:
        on_commit = transaction.get_connection(using or DEFAULT_DB_ALIAS).in_atomic_block
    elif on_commit and not transaction.get_connection(using or DEFAULT_DB_ALIAS).in_atomic_block:
        if not transaction.get_autocommit(using or DEFAULT_DB_ALIAS):
            raise TransactionManagementError(
                "on_commit=True cannot be used in manual transaction management (autocommit "
                "off outside atomic()): enqueue after your own commit, or use atomic()."
            )
        # No transaction: it has committed already, so enqueue now, and let the caller see
        # what happens (a duplicate, Redis down) while it can still act on it.
        on_commit = False
    if not on_commit:
        return submit_now(backend, job.name, submissions)
    deferred = [JobHandle(s.message.id, job.name, s.message.queue, DEFERRED) for s in submissions]
    CommitBatch.of(transaction.get_connection(using or DEFAULT_DB_ALIAS)).add(
        backend, submissions, deferred
    )
    return deferred


def enqueue_outboxed(
    job: type[Job[Any]], submissions: Sequence[Submission], using: str
) -> list[JobHandle]:
    """Write the submissions' rows into the outbox of database `using`, then send them.

    Inside atomic(): the rows are sent once it commits (handles "outboxed" until then; a
    duplicate idempotency key is logged then, not raised). Outside: the rows commit and are
    sent at once (DuplicateJob raised). With Redis down the rows wait for a worker's relay.
    """
    connection = transaction.get_connection(using)
    fast_path = outbox_rows.backend(using, _backends["redis"])
    if connection.in_atomic_block:
        outbox_rows.write(submissions, using)
        handles = [
            JobHandle(s.message.id, job.name, s.message.queue, OUTBOXED) for s in submissions
        ]
        CommitBatch.of(connection).add(fast_path, submissions, handles)
        return handles
    if not transaction.get_autocommit(using):
        raise TransactionManagementError(
            "outbox=True cannot be used in manual transaction management (autocommit off "
            "outside atomic()): enqueue inside atomic(), or after your own commit."
        )
    with transaction.atomic(using=using):
        outbox_rows.write(submissions, using)
    return submit_now(fast_path, job.name, submissions)


def submit_now(backend: Backend, job: str, submissions: Sequence[Submission]) -> list[JobHandle]:
    """Submit job's tasks now, and hand back their handles; DuplicateJob for a key taken."""
    made = []
    for s, accepted in zip(submissions, backend.submit(submissions), strict=True):
        if accepted.duplicate_of is not None:
            assert s.message.idempotency_key is not None
            raise DuplicateJob(
                job, s.message.idempotency_key, accepted.duplicate_of, accepted.duplicate_queue
            )
        made.append(JobHandle(s.message.id, job, s.message.queue, accepted.state))
    return made
