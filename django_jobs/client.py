"""Enqueueing: validate, resolve defaults, write to Redis in one round trip, return handles."""

from __future__ import annotations

import logging
import typing
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.views.decorators.debug import sensitive_variables

from django_jobs.broker.connection import connect
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.broker.redis import RedisBroker
from django_jobs.conf import JobsSettings, get_settings, to_seconds
from django_jobs.exceptions import DuplicateJob, JobsDisabled, PayloadTooLarge, UnknownQueue
from django_jobs.message import Message, encode, payload_to_json

if TYPE_CHECKING:
    from django_jobs.jobs import Job

logger = logging.getLogger("django_jobs.client")

#: Most tasks written in one pipeline by enqueue_many.
BATCH_SIZE = 500

_broker: tuple[JobsSettings, RedisBroker] | None = None


@sensitive_variables("settings")  # its redis_url may hold a password (Django's debug page)
def get_broker() -> RedisBroker:
    """Return the broker for the current settings (one client per process and settings)."""
    global _broker
    settings = get_settings()
    if _broker is None or _broker[0] is not settings:
        if not settings.enabled:
            raise JobsDisabled(
                f'Jobs are disabled: JOBS["REDIS_URL"] is not set, so there is no Redis to talk '
                f'to (JOBS["WHEN_DISABLED"] is {settings.when_disabled!r}, which decides only '
                f"what enqueue does). Set REDIS_URL (for example redis://127.0.0.1:6379/0) to "
                f"enable jobs."
            )
        assert settings.redis_url is not None
        client = connect(settings.redis_url, settings.enqueue_timeout)
        _broker = (settings, RedisBroker(client, settings))
    return _broker[1]


@dataclass
class JobHandle:
    """An enqueued job: its id, where it went, and its state when enqueue returned.

    `state` is a task state ("pending", "scheduled"), "deferred" until the transaction of an
    on_commit enqueue commits, or for jobs run with Redis disabled: "completed", "dead" (the
    inline run raised) or "skipped".
    """

    id: str
    job: str
    queue: str
    state: str

    def refresh(self) -> str | None:
        """Read the task's current state from Redis (None once it is gone)."""
        broker = get_broker()
        with broker.unavailable(writes=False):
            state = typing.cast(
                "str | None", broker.client.hget(broker.keys(self.queue).task(self.id), "state")
            )
        if state is not None:
            self.state = state
        return state


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


def _pick(*values: timedelta | float | None) -> float:
    """The first value that is set (None and 0 mean "not set"), in seconds."""
    for value in values:
        if value is not None and to_seconds(value) != 0:
            return to_seconds(value)
    return 0.0


def resolve(job: type[Job[Any]], options: Options, settings: JobsSettings) -> Resolved:
    """Apply defaults (enqueue option, then job class, then JOBS) and check the result.

    Zero or None means "the default", except for retention, where 0 means "keep nothing".
    """
    queue = options.queue or job.queue
    if queue not in settings.queues:
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
    on_commit: bool = False,
) -> list[JobHandle]:
    """Validate every (payload, idempotency key) and enqueue them; see Job.enqueue."""
    settings = get_settings()
    resolved = resolve(job, options, settings)
    messages = []
    for payload, key in items:
        data = payload_to_json(payload, job.payload_type)
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError(f"idempotency_key must be a non-empty str, got {key!r}")
        message = Message(
            id=uuid.uuid4().hex,
            job=job.name,
            queue=resolved.queue,
            payload=data,
            max_attempts=resolved.max_attempts,
            timeout=resolved.timeout,
            retention=resolved.retention,
            idempotency_key=key,
        )
        encoded = encode(message)
        size = len(encoded.encode())
        if size > settings.max_payload_bytes:
            raise PayloadTooLarge(size, settings.max_payload_bytes)
        messages.append((message, encoded))

    if not settings.enabled:
        return _when_disabled(job, messages, settings, on_commit)
    if on_commit:
        transaction.on_commit(lambda: _submit_after_commit(job, messages, resolved))
        return [JobHandle(m.id, job.name, m.queue, "deferred") for m, _ in messages]
    return _submit(job, messages, resolved)


def _submit(
    job: type[Job[Any]], messages: list[tuple[Message, str]], resolved: Resolved
) -> list[JobHandle]:
    broker = get_broker()
    keys = broker.keys(resolved.queue)
    handles = []
    for start in range(0, len(messages), BATCH_SIZE):
        batch = messages[start : start + BATCH_SIZE]
        requests = [
            EnqueueRequest(
                id=message.id,
                queue=message.queue,
                encoded=encoded,
                delay=resolved.delay,
                eta=resolved.eta,
                idempotency_key=(
                    keys.idempotency(job.name, message.idempotency_key)
                    if message.idempotency_key
                    else None
                ),
                idempotency_window=resolved.idempotency_window,
            )
            for message, encoded in batch
        ]
        for (message, _), accepted in zip(batch, broker.enqueue(requests), strict=True):
            if accepted.duplicate_of is not None:
                assert message.idempotency_key is not None
                raise DuplicateJob(job.name, message.idempotency_key, accepted.duplicate_of)
            handles.append(JobHandle(message.id, job.name, message.queue, accepted.state))
    return handles


def _submit_after_commit(
    job: type[Job[Any]], messages: list[tuple[Message, str]], resolved: Resolved
) -> None:
    try:
        _submit(job, messages, resolved)
    except DuplicateJob as exc:
        logger.info("%s", exc)


def _when_disabled(
    job: type[Job[Any]],
    messages: list[tuple[Message, str]],
    settings: JobsSettings,
    on_commit: bool,
) -> list[JobHandle]:
    if settings.when_disabled == "raise":
        raise JobsDisabled()
    if settings.when_disabled == "skip":
        for message, _ in messages:
            logger.info(
                "jobs are disabled (REDIS_URL is not set): skipped %s %s", job.name, message.id
            )
        return [JobHandle(m.id, job.name, m.queue, "skipped") for m, _ in messages]
    from django_jobs.worker.processor import run_inline

    if on_commit:
        transaction.on_commit(lambda: [run_inline(job, m) for m, _ in messages])
        return [JobHandle(m.id, job.name, m.queue, "deferred") for m, _ in messages]
    return [JobHandle(m.id, job.name, m.queue, run_inline(job, m)) for m, _ in messages]
