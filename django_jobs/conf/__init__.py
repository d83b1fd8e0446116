"""The JOBS setting as one typed, frozen object.

Read lazily on first use and dropped whenever Django's `setting_changed` fires for JOBS, so
`override_settings(JOBS=...)` works in tests. The table of keys and defaults is in `defaults`,
the validation beside it in `validation`: a bad value is a system check error at start-up
(`django_jobs.checks` reports `settings_errors()`), and `get_settings()` raises the same messages
as `ImproperlyConfigured` if something reads the settings without the checks having run.

Durations accept a number of seconds or a `timedelta`; they are stored as float seconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_jobs.conf.defaults import (
    COUNTS,
    DEFAULTS,
    DURATIONS,
    FLAGS,
    NOT_BUILT,
    QUEUED_BACKEND,
    REDIS_SCHEMES,
    WHEN_DISABLED_CHOICES,
    ZERO_ALLOWED,
    raw_settings,
)
from django_jobs.conf.queues import queue_shards
from django_jobs.conf.validation import is_valid_count, is_valid_duration, settings_errors

__all__ = [
    "COUNTS",
    "DEFAULTS",
    "DURATIONS",
    "FLAGS",
    "NOT_BUILT",
    "QUEUED_BACKEND",
    "REDIS_SCHEMES",
    "WHEN_DISABLED_CHOICES",
    "ZERO_ALLOWED",
    "JobsSettings",
    "get_settings",
    "is_valid_count",
    "is_valid_duration",
    "raw_settings",
    "settings_errors",
    "to_seconds",
]


@dataclass(frozen=True, slots=True)
class JobsSettings:
    """The validated JOBS setting; durations in seconds."""

    #: Left out of repr: it may hold a password, and a repr reaches tracebacks and debug pages.
    redis_url: str | None = field(repr=False)
    namespace: str
    #: JOBS["QUEUES"]'s names, in priority order (its options aside: `queue_shards`).
    queues: tuple[str, ...]
    concurrency: int
    async_concurrency: int
    max_attempts: int
    timeout: float
    retention: float
    idempotency_window: float
    max_payload_bytes: int
    when_disabled: str
    enqueue_on_commit: bool
    outbox: bool
    enqueue_timeout: float
    replica_acks: int
    replica_acks_timeout: float
    lease: float
    heartbeat_interval: float
    recoverer_interval: float
    forwarder_interval: float
    janitor_interval: float
    shutdown_timeout: float
    timeout_grace: float
    cancel_grace: float
    max_crashes: int
    dead_max_tasks: int
    dead_max_age: float
    unknown_job_delay: float
    unknown_job_grace: float
    max_tasks_per_child: int
    max_memory_per_child: int
    processed_retention: float
    email_backend: str | None
    email_queue: str
    #: JOBS["SCHEDULE"] as given (django_jobs.schedules checks and resolves it).
    schedule: dict[str, Any]
    flows_namespace: str
    flow_replay_lease: float
    flow_replay_renew: float
    flow_retention: float
    flow_unknown_delay: float
    flow_unknown_grace: float
    #: Requests per user to the jobs admin API ("600/minute"), or None (django_jobs.api.throttling).
    api_throttle_rate: str | None
    #: The shards of each queue of JOBS["QUEUES"] (1: one slot, not sharded; broker/shards.py).
    queue_shards: dict[str, int] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """Whether jobs run through Redis (REDIS_URL is set)."""
        return self.redis_url is not None

    @property
    def flow_queues(self) -> tuple[str, str]:
        """The flows' queue pair: (events of started flows, starts)."""
        return f"{self.flows_namespace}_critical", self.flows_namespace

    @property
    def known_queues(self) -> tuple[str, ...]:
        """Every queue a task of ours may be on: JOBS["QUEUES"], then the flows' pair."""
        return (*self.queues, *self.flow_queues)

    @property
    def served_queues(self) -> tuple[str, ...]:
        """What a worker serves by default, in strict priority order: the flows' critical
        queue, JOBS["QUEUES"], then the flows' start queue."""
        critical, start = self.flow_queues
        return (critical, *self.queues, start)


def to_seconds(value: float | timedelta) -> float:
    """Return a duration given as seconds or a timedelta, in seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


@functools.cache
def get_settings() -> JobsSettings:
    """Return the current JOBS settings, validated (raises ImproperlyConfigured if invalid)."""
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
    values["queue_shards"] = queue_shards(raw["QUEUES"])
    return JobsSettings(**values)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "JOBS":
        get_settings.cache_clear()
