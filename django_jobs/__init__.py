"""django-jobs: background jobs for Django on Redis, delivered at least once."""

from django_jobs.exceptions import (
    BrokerUnavailable,
    DuplicateJob,
    InvalidPayload,
    JobsDisabled,
    JobsError,
    JobTimeout,
    PayloadTooLarge,
    UnknownJob,
    UnknownQueue,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "BrokerUnavailable",
    "DuplicateJob",
    "InvalidPayload",
    "JobTimeout",
    "JobsDisabled",
    "JobsError",
    "PayloadTooLarge",
    "UnknownJob",
    "UnknownQueue",
    "__version__",
]
