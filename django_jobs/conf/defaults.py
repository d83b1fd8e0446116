"""Every key of JOBS with its default, and which kind of value each one takes.

One place: docs/configuration.rst mirrors this table, `validation` checks values against it and
`django_jobs.conf` builds the typed settings from it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    # Redis URL (redis://, rediss:// or unix://). None or "": jobs and the Redis cache are off.
    "REDIS_URL": None,
    # Prefix of every Redis key; two projects on one Redis need two namespaces.
    "NAMESPACE": "jobs",
    # Queue names in strict priority order: the first drains before the second is looked at.
    # Or a mapping of name -> options in that order, {"default": {"shards": 8}, ...}: a hot
    # queue split over that many Redis Cluster slots (broker/shards.py, docs/scale.rst).
    "QUEUES": ("critical", "default", "low"),
    # Child processes per worker, each running one task at a time.
    "CONCURRENCY": 10,
    # Tasks each child runs at once on one event loop (async handlers); 1: one at a time.
    "ASYNC_CONCURRENCY": 1,
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
    # Whether an enqueue inside atomic() waits for the commit by default (on_commit=None).
    "ENQUEUE_ON_COMMIT": False,
    # Whether every enqueue goes through the transactional outbox (an OutboxJob row written in
    # the enqueue's transaction, sent to Redis after the commit, by a worker's relay if need be).
    "OUTBOX": False,
    # Seconds an enqueue may wait for Redis before raising BrokerUnavailable.
    "ENQUEUE_TIMEOUT": 5,
    # Replicas that must have an enqueue's tasks (Redis WAIT) before it returns; 0: answer as soon
    # as the primary has them (a failover may then lose the last enqueues). See docs/scale.rst.
    "REPLICA_ACKS": 0,
    # Seconds an enqueue waits for those replicas before raising ReplicaAckTimeout (under half of
    # ENQUEUE_TIMEOUT: check E050).
    "REPLICA_ACKS_TIMEOUT": 1,
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
    # Seconds a running task asked to cancel (JobCanceled raised in it) gets to stop before its
    # child is killed and replaced; the task ends canceled either way.
    "CANCEL_GRACE": 10,
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
    # Seconds a ProcessedTask row (written by once(), atomic jobs and mail) is kept.
    "PROCESSED_RETENTION": 30 * 86400,
    # Before Django 6.1 (no MAILERS): the dotted path of the backend that really sends the mail
    # queued by django_jobs.mail.QueuedEmailBackend.
    "EMAIL_BACKEND": None,
    # The queue of the jobs that deliver queued mail.
    "EMAIL_QUEUE": "critical",
    # Schedules by name: {"job": ..., "cron": "0 3 * * *" or "every": 30, ...}; checked by
    # django_jobs.schedules (E020-E027), not here.
    "SCHEDULE": {},
    # Flows (django_jobs.flows): their queue pair is <FLOWS_NAMESPACE>_critical (events of
    # started flows, served first of all) and <FLOWS_NAMESPACE> (starts, served last).
    "FLOWS_NAMESPACE": "flows",
    # Seconds a flow's replay lease lasts unless renewed, and between two renewals by the
    # worker's supervisor: two workers never replay one call at once.
    "FLOW_REPLAY_LEASE": 30,
    "FLOW_REPLAY_RENEW": 10,
    # Seconds a finished flow run (its status, metadata and memoised values) is kept.
    "FLOW_RETENTION": 7 * 86400,
    # Seconds before a worker that does not know a flow publishes its event again, and for how
    # long in all before the event goes dead (rolling deploys).
    "FLOW_UNKNOWN_DELAY": 1,
    "FLOW_UNKNOWN_GRACE": 600,
    # Requests one user may make to the jobs admin API, as DRF writes rates ("600/minute",
    # "20/second"); past it the API answers 429. None: no throttle of ours.
    "API_THROTTLE_RATE": "600/minute",
}

#: Keys of the design that nothing reads yet, with the feature that will: setting one is check
#: E002 saying so, rather than a value silently ignored.
NOT_BUILT: dict[str, str] = {}

#: Keys whose value is a duration in seconds (a number or a timedelta).
DURATIONS = frozenset(
    {
        "TIMEOUT",
        "RETENTION",
        "IDEMPOTENCY_WINDOW",
        "ENQUEUE_TIMEOUT",
        "REPLICA_ACKS_TIMEOUT",
        "LEASE",
        "HEARTBEAT_INTERVAL",
        "RECOVERER_INTERVAL",
        "FORWARDER_INTERVAL",
        "JANITOR_INTERVAL",
        "SHUTDOWN_TIMEOUT",
        "TIMEOUT_GRACE",
        "CANCEL_GRACE",
        "DEAD_MAX_AGE",
        "UNKNOWN_JOB_DELAY",
        "UNKNOWN_JOB_GRACE",
        "PROCESSED_RETENTION",
        "FLOW_REPLAY_LEASE",
        "FLOW_REPLAY_RENEW",
        "FLOW_RETENTION",
        "FLOW_UNKNOWN_DELAY",
        "FLOW_UNKNOWN_GRACE",
    }
)
#: Durations and counts for which 0 is meaningful (see DEFAULTS).
ZERO_ALLOWED = frozenset(
    {"RETENTION", "MAX_TASKS_PER_CHILD", "MAX_MEMORY_PER_CHILD", "REPLICA_ACKS"}
)
#: Keys whose value is a count (an int).
COUNTS = frozenset(
    {
        "CONCURRENCY",
        "ASYNC_CONCURRENCY",
        "MAX_ATTEMPTS",
        "MAX_PAYLOAD_BYTES",
        "MAX_CRASHES",
        "DEAD_MAX_TASKS",
        "MAX_TASKS_PER_CHILD",
        "MAX_MEMORY_PER_CHILD",
        "REPLICA_ACKS",
    }
)
#: The options a queue of a QUEUES mapping takes, and the most shards one may have: each shard
#: is a BLPOP per idle worker child on a Cluster, and a key per state (docs/scale.rst).
QUEUE_OPTIONS = ("shards",)
MAX_SHARDS = 64
#: Keys whose value is True or False.
FLAGS = frozenset({"ENQUEUE_ON_COMMIT", "OUTBOX"})
WHEN_DISABLED_CHOICES = ("inline", "skip", "raise")
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")
#: The dotted path of django_jobs.mail.QueuedEmailBackend (named, not imported: layers).
QUEUED_BACKEND = "django_jobs.mail.QueuedEmailBackend"


def raw_settings() -> dict[str, Any]:
    """Return the user's JOBS merged over the defaults, unvalidated."""
    user = getattr(django_settings, "JOBS", {})
    if not isinstance(user, dict):
        return {"__invalid__": user}
    return {**DEFAULTS, **user}
