"""django-jobs: background jobs for Django on Redis, delivered at least once."""

from typing import TYPE_CHECKING

from django_jobs.exceptions import (
    BrokerRefused,
    BrokerUnavailable,
    DuplicateJob,
    InvalidPayload,
    JobCanceled,
    JobsDisabled,
    JobsError,
    JobTimeout,
    LeaseLost,
    PayloadTooLarge,
    ReplicaAckTimeout,
    TaskRunning,
    UnknownJob,
    UnknownQueue,
    UnknownSchedule,
)
from django_jobs.jobs import Fail, Job, JobContext, Retry, SkipRetry
from django_jobs.schedules.declare import Cron, Every

if TYPE_CHECKING:
    from django_jobs.canceling import CancelOutcome, cancel
    from django_jobs.client import JobHandle
    from django_jobs.idempotency import once

__version__ = "0.1.0.dev0"

__all__ = [
    "BrokerRefused",
    "BrokerUnavailable",
    "CancelOutcome",
    "Cron",
    "DuplicateJob",
    "Every",
    "Fail",
    "InvalidPayload",
    "Job",
    "JobCanceled",
    "JobContext",
    "JobHandle",
    "JobTimeout",
    "JobsDisabled",
    "JobsError",
    "LeaseLost",
    "PayloadTooLarge",
    "ReplicaAckTimeout",
    "Retry",
    "SkipRetry",
    "TaskRunning",
    "UnknownJob",
    "UnknownQueue",
    "UnknownSchedule",
    "__version__",
    "cancel",
    "once",
]


def __getattr__(name: str) -> object:
    # Not a circle: Django imports this package before the app registry is ready, and the
    # client reaches the models (its inline backend runs handlers): load it on first use.
    if name == "JobHandle":
        from django_jobs.client import JobHandle

        return JobHandle
    # Loaded on first use, like the client: `import django_jobs` loads no Redis client.
    if name in ("cancel", "CancelOutcome"):
        from django_jobs import canceling

        return getattr(canceling, name)
    # once() writes ProcessedTask rows: its model cannot load before the app registry is ready.
    if name == "once":
        from django_jobs.idempotency import once

        return once
    raise AttributeError(f"module 'django_jobs' has no attribute {name!r}")
