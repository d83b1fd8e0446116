"""`Job[Payload]`: the base class of every job, the control signals a handler raises (`Retry`,
`Fail`, `SkipRetry`), and the registry that finds a job by name."""

from __future__ import annotations

import dataclasses
import inspect
import math
import random
import typing
from collections.abc import Awaitable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from django.apps import apps
from django.core.exceptions import AppRegistryNotReady

from django_jobs.broker.limits import Limit, limit
from django_jobs.conf import get_settings
from django_jobs.exceptions import UnknownJob
from django_jobs.keys import one_shard_jobs
from django_jobs.message import JobContext as JobContext  # defined with the plain data

if TYPE_CHECKING:
    from django_jobs.client import JobHandle
    from django_jobs.schedules.declare import Cron, Every

P = TypeVar("P")

#: Delays before the second, third, fourth and fifth runs, in seconds (before jitter).
BACKOFF = (1.0, 4.0, 15.0, 60.0)
#: The longest delay between two runs, in seconds.
MAX_BACKOFF = 3600.0


class Retry(Exception):
    """Raise in `run` to run the task again after `delay` seconds, without counting a failure.

    No attempt is spent, no failure counted, no traceback kept. Bounded: a task's first
    `MAX_FREE_RETRIES` deliveries may ask for it for free; past that each Retry spends an
    attempt, so max_attempts ends a handler that asks for ever.
    """

    def __init__(self, delay: timedelta | float = 0.0, reason: str = "") -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"Retry(delay=...) must be 0 or more seconds, got {delay!r}")
        self.delay = seconds
        self.reason = reason
        super().__init__(reason or f"retry in {seconds:g}s")


class Fail(Exception):
    """Raise in `run` to send the task to dead now, with `reason` as its error: no retry."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class SkipRetry(Fail):
    """Raise in `run` (``raise SkipRetry(...) from exc``) for a failure that no later attempt can
    fix (a template that does not exist, a payload the code can never accept): the task goes
    dead now with this error and its traceback."""


#: Deliveries of a task during which `Retry` spends no attempt (see `Retry`).
MAX_FREE_RETRIES = 20


class Job(Generic[P]):
    """Subclass with a dataclass payload type and implement `run`.

    Class attributes are defaults that each enqueue may override; None means the JOBS setting.
    """

    #: Registered name; defaults to "<app_label>.<ClassName>". Keep it stable across deploys.
    name: ClassVar[str]
    #: The payload dataclass, taken from `Job[Payload]`.
    payload_type: ClassVar[type[Any]]
    queue: ClassVar[str] = "default"
    max_attempts: ClassVar[int | None] = None
    timeout: ClassVar[timedelta | float | None] = None
    #: How long a completed task is kept; 0 keeps nothing.
    retention: ClassVar[timedelta | float | None] = None
    idempotency_window: ClassVar[timedelta | float | None] = None
    #: The payloads carry personal data: the admin, the API, the CLI and the logs show its
    #: payload and idempotency key as "[redacted: sensitive job]" (written in each task at
    #: enqueue, so a reader that does not know the job type still redacts). `run` gets it whole.
    sensitive: ClassVar[bool] = False
    #: Run `run` in one database transaction with a ProcessedTask row keyed by the task id: a
    #: run killed midway commits nothing, and a redelivery of a task whose run committed is
    #: acknowledged without calling `run` again.
    atomic: ClassVar[bool] = False
    #: At most this many of its tasks run at once, across every worker (per queue); the others
    #: wait without spending an attempt (docs/jobs.rst, "Limits"). None: no limit.
    concurrency_limit: ClassVar[int | None] = None
    #: At most this many starts per period across every worker (per queue): "100/m", "5/s",
    #: "1000/h"; the others are scheduled in the next windows with room. None: no limit.
    rate_limit: ClassVar[str | None] = None
    #: Fire this job on a schedule: `Cron("0 3 * * *")` or `Every(timedelta(minutes=5))`
    #: (from django_jobs), named after the job; JOBS["SCHEDULE"] may override it by that name.
    schedule: ClassVar[Cron | Every | None] = None
    #: The payload each scheduled fire enqueues (an instance, or a dict of its fields); None:
    #: the payload type built with its defaults.
    schedule_payload: ClassVar[Any] = None

    def __init__(self, context: JobContext) -> None:
        self.context = context

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        payload_type = _payload_type(cls)
        if payload_type is None:
            return  # still generic: an abstract base for other jobs
        cls.payload_type = payload_type
        if cls.atomic and inspect.iscoroutinefunction(cls.run):
            raise TypeError(
                f"{cls.__qualname__}: atomic = True needs a plain `def run` (one database "
                "transaction cannot span awaits); make run sync, or keep it async and wrap "
                "its database writes in once() blocks through sync_to_async"
            )
        if "name" not in cls.__dict__:
            cls.name = _default_name(cls)
        registry.add(cls)

    def run(self, payload: P) -> Awaitable[None] | None:
        """Do the work. May run more than once for one enqueue: make its effects idempotent.

        ``def run`` or ``async def run``: a coroutine runs on an event loop in the worker's
        child, beside others with ``runworker --async-concurrency N`` (docs/async.rst).
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement run(payload)")

    @classmethod
    def backoff(cls, attempt: int) -> float:
        """Return the delay in seconds before the next run, after `attempt` failed runs."""
        if attempt <= len(BACKOFF):
            base = BACKOFF[attempt - 1]
        else:
            base = min(BACKOFF[-1] * 4 ** (attempt - len(BACKOFF)), MAX_BACKOFF)
        return base * random.uniform(0.9, 1.1)

    @classmethod
    def default_queue(cls) -> str:
        """The queue an enqueue that names none goes to: `queue`; override to read settings."""
        return cls.queue

    @classmethod
    def idempotency_queue(cls) -> str:
        """The queue whose Redis slot holds this job type's idempotency keys, whichever queue
        a task goes to (broker/handoff.py): its default queue, or for a job type with none
        (Django's @task functions) the first of JOBS["QUEUES"]."""
        return cls.default_queue() or get_settings().queues[0]

    @classmethod
    def check_payload(cls, payload: P) -> None:
        """Called by enqueue and enqueue_many on each payload before anything is sent: raise to
        refuse it at the call site (a missing template, say) rather than as a dead task later."""

    @classmethod
    def enqueue(
        cls,
        payload: P,
        *,
        queue: str | None = None,
        delay: timedelta | float | None = None,
        eta: datetime | None = None,
        max_attempts: int | None = None,
        timeout: timedelta | float | None = None,
        retention: timedelta | float | None = None,
        idempotency_key: str | None = None,
        idempotency_window: timedelta | float | None = None,
        on_commit: bool | None = None,
        outbox: bool | None = None,
    ) -> JobHandle:
        """Enqueue one run of this job and return its handle.

        on_commit: True sends it when the surrounding transaction commits (the handle has the
        id at once); None (the default) does so inside atomic() if JOBS["ENQUEUE_ON_COMMIT"].
        outbox: True writes it in the database first, in the current transaction, and sends it
        after the commit (state "outboxed" until Redis accepted it); None: JOBS["OUTBOX"].

        Raises DuplicateJob if idempotency_key was accepted inside its window (treat as success),
        InvalidPayload, PayloadTooLarge, UnknownQueue, or BrokerUnavailable (which may still mean
        the job was enqueued).
        """
        from django_jobs.client import Options, enqueue

        cls.check_payload(payload)
        given = Options.of(queue, delay, eta, max_attempts, timeout, retention, idempotency_window)
        items = [(payload, idempotency_key)]
        return enqueue(cls, items, given, on_commit=on_commit, outbox=outbox)[0]

    @classmethod
    def enqueue_many(
        cls,
        payloads: Iterable[P],
        *,
        queue: str | None = None,
        delay: timedelta | float | None = None,
        eta: datetime | None = None,
        max_attempts: int | None = None,
        timeout: timedelta | float | None = None,
        retention: timedelta | float | None = None,
        on_commit: bool | None = None,
        outbox: bool | None = None,
    ) -> list[JobHandle]:
        """Enqueue many runs in one Redis round trip per batch; return their handles in order.

        Every payload is validated before anything is written. on_commit and outbox: as for
        `enqueue`.
        """
        from django_jobs.client import Options, enqueue

        items = [(payload, None) for payload in payloads]
        for payload, _ in items:
            cls.check_payload(payload)
        given = Options.of(queue, delay, eta, max_attempts, timeout, retention)
        return enqueue(cls, items, given, on_commit=on_commit, outbox=outbox)


def _payload_type(cls: type) -> type[Any] | None:
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Job):
            (arg,) = typing.get_args(base)
            if isinstance(arg, TypeVar):
                return None
            if not (isinstance(arg, type) and dataclasses.is_dataclass(arg)):
                raise TypeError(f"{cls.__qualname__}: the payload type {arg!r} is not a dataclass")
            return arg
    inherited: type[Any] | None = getattr(cls, "payload_type", None)
    return inherited


def _default_name(cls: type) -> str:
    try:
        app = apps.get_containing_app_config(cls.__module__)
    except AppRegistryNotReady:
        app = None
    if app is not None and "<locals>" not in cls.__qualname__:
        return f"{app.label}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


class Registry:
    """Job classes by registered name; two classes under one name is check django_jobs.E011."""

    def __init__(self) -> None:
        self.jobs: dict[str, type[Job[Any]]] = {}
        self.conflicts: dict[str, list[str]] = {}
        #: The limits of the job types that have one, read once as each class is defined (so
        #: that a worker child takes them without touching every class it inherited).
        self._limits: dict[str, Limit] = {}

    def add(self, cls: type[Job[Any]]) -> None:
        found = limit(cls.name, cls.concurrency_limit, cls.rate_limit)  # raises: not added
        existing = self.jobs.get(cls.name)
        same = existing is not None and (existing.__module__, existing.__qualname__) == (
            cls.__module__,
            cls.__qualname__,
        )
        if existing is None or same:  # same: a module imported again (autoreload)
            self.jobs[cls.name] = cls
            if found is None:
                self._limits.pop(cls.name, None)
                one_shard_jobs.discard(cls.name)
            else:
                self._limits[cls.name] = found
                one_shard_jobs.add(cls.name)  # its tasks on one shard (broker/shards.py)
            return
        paths = self.conflicts.setdefault(cls.name, [_path(existing)])
        paths.append(_path(cls))

    def limits(self) -> list[Limit]:
        """The limits of the job types that have one (see `Job.concurrency_limit`)."""
        return list(self._limits.values())

    def get(self, name: str) -> type[Job[Any]]:
        """Return the job class registered as name, or raise UnknownJob."""
        try:
            return self.jobs[name]
        except KeyError:
            raise UnknownJob(name) from None


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


registry = Registry()
