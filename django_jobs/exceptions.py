"""Every error django-jobs raises, under one root: `JobsError`.

Each error also subclasses the built-in that matches its meaning, so code that already catches
`ValueError` or `LookupError` keeps working. The docstring of each class is its default message
and says what to do about it.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class JobsError(Exception):
    """A django-jobs operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class JobsDisabled(JobsError, ImproperlyConfigured):
    """Jobs are disabled: JOBS["REDIS_URL"] is not set and JOBS["WHEN_DISABLED"] is "raise".

    Set REDIS_URL (for example redis://127.0.0.1:6379/0) to enable jobs, or set WHEN_DISABLED to
    "inline" or "skip".
    """


class BrokerUnavailable(JobsError, ConnectionError):
    """Redis did not answer in time.

    The operation may or may not have been applied: an enqueue that raised this may still have been
    accepted. Check that Redis is running and reachable at JOBS["REDIS_URL"], then retry; with an
    idempotency key the retry cannot create a second job.
    """


class BrokerRefused(BrokerUnavailable):
    """Redis answered but refused the operation, and nothing was changed.

    Redis is out of memory (maxmemory), read-only, denies a command (ACL), or a key under our
    namespace holds something django-jobs did not write. The message says which; a worker backs
    off and tries again, as for any BrokerUnavailable.
    """

    def __init__(
        self, message: str | None = None, *, key: str | None = None, transient: bool = False
    ) -> None:
        #: The Redis key found with the wrong type, when that was the cause.
        self.key = key
        #: A Redis Cluster slot on the move or a failover under way: the call did not run, and
        #: the same call may be made again in a moment (no backoff is needed).
        self.transient = transient
        super().__init__(message)


class ReplicaAckTimeout(BrokerUnavailable):
    """Redis took the enqueue, but fewer replicas than JOBS["REPLICA_ACKS"] confirmed they have it
    within JOBS["REPLICA_ACKS_TIMEOUT"].

    The tasks are on the primary and run unless it fails before a replica has copied them: a
    failover now would lose them. Check the replicas (INFO replication on the primary: how many
    are connected and how far behind), or lower REPLICA_ACKS to what they can answer. Retrying
    the enqueue makes a second task unless it has an idempotency key; under JOBS["OUTBOX"] the
    row is kept and sent again until a replica confirms it.
    """

    def __init__(self, message: str | None = None, *, acked: int = 0, wanted: int = 0) -> None:
        #: How many replicas confirmed the write, and how many JOBS["REPLICA_ACKS"] asks for.
        self.acked = acked
        self.wanted = wanted
        super().__init__(message)


class DuplicateJob(JobsError):
    """A job with this idempotency key was already accepted inside its window; treat as success."""

    def __init__(
        self,
        job_name: str,
        idempotency_key: str,
        original_id: str,
        original_queue: str | None = None,
    ) -> None:
        self.job_name = job_name
        self.idempotency_key = idempotency_key
        self.original_id = original_id
        #: The queue of the original (the key is the job type's on every queue), if known.
        self.original_queue = original_queue
        where = f" on queue {original_queue}" if original_queue else ""
        super().__init__(
            f"{job_name} with idempotency key {idempotency_key!r} was already accepted as job "
            f"{original_id}{where}; the original is on its way, so treat this as success."
        )


class InvalidPayload(JobsError, TypeError):
    """The payload is not an instance of the job's payload dataclass, or does not survive JSON."""


class PayloadTooLarge(JobsError, ValueError):
    """The encoded payload is larger than JOBS["MAX_PAYLOAD_BYTES"]."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"The encoded payload is {size} bytes, over the limit of {limit} bytes "
            f'(JOBS["MAX_PAYLOAD_BYTES"]). Pass references (a primary key, a storage path) '
            f"instead of the data itself."
        )


class UnknownQueue(JobsError, ValueError):
    """The queue is not one of JOBS["QUEUES"]."""

    def __init__(self, queue: str, configured: tuple[str, ...]) -> None:
        self.queue = queue
        super().__init__(
            f"Unknown queue {queue!r}: the configured queues are {', '.join(configured)}. "
            f'Use one of them, or add it to JOBS["QUEUES"].'
        )


class UnknownJob(JobsError, LookupError):
    """No job class is registered under this name.

    Check that the job's module is a `jobs.py` in an installed app (or imported at start-up) and
    that this process runs the same code as the one that enqueued it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"unknown job type {name!r}: is this worker's code up to date? Job classes are "
            f"discovered from the jobs.py module of every installed app."
        )


class JobTimeout(JobsError, TimeoutError):
    """The job ran past its timeout and was interrupted; it will be retried."""


class LeaseLost(JobsError):
    """This run's task lost its lease and was handed to another worker; the run was interrupted.

    Raised inside the handler, as `JobTimeout` is. Nothing is written for the run: the task is
    the other worker's now. A handler that catches it should return at once.
    """


class JobCanceled(JobsError):
    """The task was canceled while it ran (django_jobs.cancel, the admin, the API or the CLI).

    Raised inside the handler, as `JobTimeout` is. The task ends canceled, not retried and not
    dead, whether the handler lets it propagate or catches it and returns: catch it only to
    clean up, then return (or re-raise) within JOBS["CANCEL_GRACE"], after which the run's
    child is killed, and the task ends canceled all the same.
    """


class MailNotConfigured(JobsError, ImproperlyConfigured):
    """Queued mail has no backend to leave through.

    With Django 6.1's MAILERS, give the queued mailer ``"OPTIONS": {"mailer": "<alias>"}`` naming
    a mailer that really sends; before 6.1, set JOBS["EMAIL_BACKEND"] to the backend that really
    sends (for example "django.core.mail.backends.smtp.EmailBackend").
    """


class TaskRunning(JobsError, ValueError):
    """The task is running (active), so it cannot be deleted now; wait until it finishes."""

    def __init__(self, task_id: str, queue: str) -> None:
        self.task_id = task_id
        self.queue = queue
        super().__init__(
            f"Task {task_id} is running (active) and cannot be deleted; wait until it finishes, "
            f"then delete it."
        )


class UnknownSchedule(JobsError, LookupError):
    """No schedule is configured under this name (JOBS["SCHEDULE"] or a job's `schedule`)."""

    def __init__(self, name: str, configured: tuple[str, ...]) -> None:
        self.name = name
        self.configured = configured
        known = ", ".join(configured) or "none"
        super().__init__(
            f"Unknown schedule {name!r}: the configured schedules are {known}. A schedule "
            f"removed from the settings is gone at the next worker start."
        )
