"""The JOBS setting as one typed, frozen object.

Read lazily on first use and dropped whenever Django's `setting_changed` fires for JOBS, so
`override_settings(JOBS=...)` works in tests. Validation lives in `checks.py`: a bad value is a
system check error at start-up, and `get_settings()` raises the same messages as
`ImproperlyConfigured` if something reads the settings without the checks having run.

Durations accept a number of seconds or a `timedelta`; they are stored as float seconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

#: Every key of JOBS with its default. One place: docs/configuration.rst mirrors this table.
DEFAULTS: dict[str, Any] = {
    # Redis URL (redis://, rediss:// or unix://). None or "": jobs, cron and the cache are off.
    "REDIS_URL": None,
    # Prefix of every Redis key; two projects on one Redis need two namespaces.
    "NAMESPACE": "jobs",
    # Queue names in strict priority order: the first drains before the second is looked at.
    "QUEUES": ("critical", "default", "low"),
    # Child processes per worker, each running one task at a time.
    "CONCURRENCY": 10,
    # Runs in all (first run plus retries) before a failing task goes dead.
    "MAX_ATTEMPTS": 5,
    # Seconds a task may run before JobTimeout is raised inside it.
    "TIMEOUT": 300,
    # Seconds a completed task is kept (0: delete on success).
    "RETENTION": 86400,
    # Seconds an idempotency key refuses duplicates, counted from the first accepted enqueue.
    "IDEMPOTENCY_WINDOW": 86400,
    # Largest accepted encoded payload, in bytes.
    "MAX_PAYLOAD_BYTES": 65536,
    # What enqueue does when REDIS_URL is unset: "inline" (run now), "skip" or "raise".
    "WHEN_DISABLED": "inline",
    # Cron entries: name -> {"job": dotted path or registered name, "cron": "*/5 * * * *", ...}.
    "SCHEDULE": {},
    # Seconds an enqueue may wait for Redis before raising BrokerUnavailable.
    "ENQUEUE_TIMEOUT": 5,
    # Seconds a worker's claim on a running task lasts unless renewed.
    "LEASE": 30,
    # Seconds between worker heartbeats (each one renews the leases of running tasks).
    "HEARTBEAT_INTERVAL": 10,
    # Seconds between sweeps for tasks whose lease expired (their worker died).
    "RECOVERER_INTERVAL": 5,
    # Seconds between moves of due scheduled and retry tasks to pending.
    "FORWARDER_INTERVAL": 1,
    # Seconds between purges of expired completed and dead tasks.
    "JANITOR_INTERVAL": 60,
    # Seconds a stopping worker waits for running tasks before putting them back.
    "SHUTDOWN_TIMEOUT": 30,
    # Seconds past its timeout a task's child gets before it is killed and replaced.
    "TIMEOUT_GRACE": 10,
    # Crashes (worker died under the task) before a task goes dead.
    "MAX_CRASHES": 3,
    # Dead tasks kept per queue (oldest trimmed first) and their maximum age in seconds.
    "DEAD_MAX_TASKS": 10000,
    "DEAD_MAX_AGE": 90 * 86400,
    # Seconds a task of an unknown job type waits before it is offered again, and for how long
    # in all it may bounce before it goes dead (rolling deploys).
    "UNKNOWN_JOB_DELAY": 10,
    "UNKNOWN_JOB_GRACE": 600,
    # Tasks a child runs before it is replaced (0: never), and its memory ceiling in MiB (0: none).
    "MAX_TASKS_PER_CHILD": 0,
    "MAX_MEMORY_PER_CHILD": 0,
    # Seconds a flow replay lease lasts unless renewed.
    "FLOW_REPLAY_LEASE": 30,
    # Seconds a ProcessedTask row (written by once(), atomic jobs and mail) is kept.
    "PROCESSED_RETENTION": 30 * 86400,
    # Before Django 6.1 (no MAILERS): the dotted path of the backend that really sends the mail
    # queued by django_jobs.mail.QueuedEmailBackend.
    "EMAIL_BACKEND": None,
    # The queue of the jobs that deliver queued mail.
    "EMAIL_QUEUE": "critical",
}

#: Keys whose value is a duration in seconds (a number or a timedelta).
DURATIONS = frozenset(
    {
        "TIMEOUT",
        "RETENTION",
        "IDEMPOTENCY_WINDOW",
        "ENQUEUE_TIMEOUT",
        "LEASE",
        "HEARTBEAT_INTERVAL",
        "RECOVERER_INTERVAL",
        "FORWARDER_INTERVAL",
        "JANITOR_INTERVAL",
        "SHUTDOWN_TIMEOUT",
        "TIMEOUT_GRACE",
        "DEAD_MAX_AGE",
        "UNKNOWN_JOB_DELAY",
        "UNKNOWN_JOB_GRACE",
        "FLOW_REPLAY_LEASE",
        "PROCESSED_RETENTION",
    }
)
#: Durations and counts for which 0 is meaningful (see DEFAULTS).
ZERO_ALLOWED = frozenset({"RETENTION", "MAX_TASKS_PER_CHILD", "MAX_MEMORY_PER_CHILD"})
#: Keys whose value is a count (an int).
COUNTS = frozenset(
    {
        "CONCURRENCY",
        "MAX_ATTEMPTS",
        "MAX_PAYLOAD_BYTES",
        "MAX_CRASHES",
        "DEAD_MAX_TASKS",
        "MAX_TASKS_PER_CHILD",
        "MAX_MEMORY_PER_CHILD",
    }
)
WHEN_DISABLED_CHOICES = ("inline", "skip", "raise")


@dataclass(frozen=True, slots=True)
class JobsSettings:
    """The validated JOBS setting; durations in seconds."""

    #: Left out of repr: it may hold a password, and a repr reaches tracebacks and debug pages.
    redis_url: str | None = field(repr=False)
    namespace: str
    queues: tuple[str, ...]
    concurrency: int
    max_attempts: int
    timeout: float
    retention: float
    idempotency_window: float
    max_payload_bytes: int
    when_disabled: str
    schedule: dict[str, Any]
    enqueue_timeout: float
    lease: float
    heartbeat_interval: float
    recoverer_interval: float
    forwarder_interval: float
    janitor_interval: float
    shutdown_timeout: float
    timeout_grace: float
    max_crashes: int
    dead_max_tasks: int
    dead_max_age: float
    unknown_job_delay: float
    unknown_job_grace: float
    max_tasks_per_child: int
    max_memory_per_child: int
    flow_replay_lease: float
    processed_retention: float
    email_backend: str | None
    email_queue: str

    @property
    def enabled(self) -> bool:
        """Whether jobs run through Redis (REDIS_URL is set)."""
        return self.redis_url is not None


def raw_settings() -> dict[str, Any]:
    """Return the user's JOBS merged over the defaults, unvalidated."""
    user = getattr(django_settings, "JOBS", {})
    if not isinstance(user, dict):
        return {"__invalid__": user}
    return {**DEFAULTS, **user}


def to_seconds(value: float | timedelta) -> float:
    """Return a duration given as seconds or a timedelta, in seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


@functools.cache
def get_settings() -> JobsSettings:
    """Return the current JOBS settings, validated (raises ImproperlyConfigured if invalid)."""
    from django_jobs.checks import settings_errors

    errors = settings_errors()
    if errors:
        lines = [f"{e.id}: {e.msg} HINT: {e.hint}" for e in errors]
        raise ImproperlyConfigured("Invalid JOBS setting:\n" + "\n".join(lines))
    raw = raw_settings()
    values: dict[str, Any] = {}
    for key in DEFAULTS:
        value = raw[key]
        if key in DURATIONS:
            value = to_seconds(value)
        elif key == "QUEUES":
            value = tuple(value)
        elif key == "REDIS_URL":
            value = value or None
        values[key.lower()] = value
    return JobsSettings(**values)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "JOBS":
        get_settings.cache_clear()
