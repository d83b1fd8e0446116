"""System checks for django-jobs: every bad JOBS value is an error with an id and a hint.

The JOBS checks themselves live with the settings (`django_jobs.conf.validation`); this module
registers them and adds the checks that need the job registry or a database.

| id                  | problem                                                        |
|---------------------|----------------------------------------------------------------|
| django_jobs.E001    | JOBS is not a dict                                             |
| django_jobs.E002    | JOBS has a key django-jobs does not know (a typo?), or one whose |
|                     | feature is not built yet (NOT_BUILT in conf/defaults.py)       |
| django_jobs.E003    | REDIS_URL is not a redis(s)://, unix://, redis(s)+sentinel:// or |
|                     | redis(s)+cluster:// URL, or has a bad TLS query option         |
| django_jobs.E004    | NAMESPACE is empty or holds characters that break key names    |
| django_jobs.E005    | QUEUES is empty, not a list (or mapping) of names, or repeats one |
| django_jobs.E006    | a duration is not a positive number of seconds or timedelta    |
| django_jobs.E007    | a count is not a positive integer                              |
| django_jobs.E008    | WHEN_DISABLED is not inline, skip or raise                     |
| django_jobs.E010    | HEARTBEAT_INTERVAL is not shorter than LEASE                   |
| django_jobs.E011    | two job classes share one registered name                      |
| django_jobs.E012    | a job class default (queue, attempts, timeout...) is invalid   |
| django_jobs.E013    | EMAIL_BACKEND is not a dotted path, or is the queued backend   |
| django_jobs.E014    | EMAIL_QUEUE is not one of QUEUES                               |
| django_jobs.E015    | queued mail has no real backend: a queued mailer names itself, |
|                     | a queued mailer or a missing alias (in django_jobs/mail/checks) |
| django_jobs.E016    | ENQUEUE_ON_COMMIT or OUTBOX is not True or False               |
| django_jobs.E040    | FLOWS_NAMESPACE is not a queue name, or its queues are in QUEUES |
| django_jobs.E041    | FLOW_REPLAY_RENEW is not shorter than FLOW_REPLAY_LEASE        |
| django_jobs.E042    | two flow classes share one registered name                     |
| django_jobs.E020-27 | a bad schedule entry, named (see django_jobs.schedules.registry) |
| django_jobs.E050    | REPLICA_ACKS_TIMEOUT is not shorter than half of ENQUEUE_TIMEOUT |
| django_jobs.E051    | a queue's options in a QUEUES mapping are not a dict, name an  |
|                     | unknown option, or give shards outside 1 to MAX_SHARDS (64)    |
| django_jobs.W001    | one worker's connections reach PostgreSQL's max_connections    |
| django_jobs.W002    | OUTBOX is on and no worker has relayed the outbox for a while  |
| django_jobs.I001    | jobs are disabled (REDIS_URL unset): what enqueue does instead |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Info, Tags, Warning, register
from django.db import DatabaseError, connections
from django.utils import timezone

from django_jobs.backends.outbox import last_relay
from django_jobs.conf import (
    get_settings,
    is_valid_count,
    is_valid_duration,
    raw_settings,
    settings_errors,
)
from django_jobs.conf.queues import error
from django_jobs.flows import registry as flows
from django_jobs.jobs import registry
from django_jobs.schedules import schedule_errors

#: The mail jobs: they run on JOBS["EMAIL_QUEUE"] (checked as E014), not on their class queue.
EMAIL_JOBS = frozenset({"django_jobs.DeliverEmail", "django_jobs.SendEmail"})


@register("django_jobs")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check the JOBS setting."""
    return list(settings_errors())


@register("django_jobs")
def check_jobs(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the registered job classes: unique names and valid class defaults."""
    errors: list[CheckMessage] = []
    for name, paths in sorted(registry.conflicts.items()):
        errors.append(
            error(
                11,
                f"Job name {name!r} is registered by {len(paths)} classes: {', '.join(paths)}.",
                "Give each job class a unique `name` class attribute; the name is what the "
                "queue stores, so keep it stable across deploys.",
            )
        )
    if settings_errors():
        return errors  # the queues cannot be trusted; the settings errors say why
    queues = raw_settings()["QUEUES"]
    for name, job in sorted(registry.jobs.items()):
        problems = []
        # queue "": no class default, every enqueue names its queue (django_jobs.DjangoTask).
        if job.queue and job.queue not in queues and name not in EMAIL_JOBS:
            problems.append(f"queue {job.queue!r} is not one of JOBS['QUEUES'] ({queues})")
        if job.max_attempts is not None and not is_valid_count(job.max_attempts):
            problems.append(f"max_attempts {job.max_attempts!r} is not a whole number >= 1")
        for attr in ("timeout", "idempotency_window"):
            value = getattr(job, attr)
            if value is not None and not is_valid_duration(value):
                problems.append(f"{attr} {value!r} is not a positive duration")
        if job.retention is not None and not is_valid_duration(job.retention, zero_ok=True):
            problems.append(f"retention {job.retention!r} is not a duration of 0 or more")
        for problem in problems:
            errors.append(
                error(
                    12,
                    f"Job {name!r}: {problem}.",
                    "Fix the class attribute, or leave it out to use the JOBS default.",
                )
            )
    return errors


@register("django_jobs")
def check_flows(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check the registered flow classes: unique names."""
    return [
        error(
            42,
            f"Flow name {name!r} is registered by {len(paths)} classes: {', '.join(paths)}.",
            "Give each flow class a unique `name` class attribute; the name is what its events "
            "and runs store, so keep it stable across deploys.",
        )
        for name, paths in sorted(flows.conflicts.items())
    ]


@register("django_jobs")
def check_schedules(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check every schedule (JOBS["SCHEDULE"], job classes' `schedule`); never connects."""
    if settings_errors():
        return []  # the queues cannot be trusted; the settings errors say why
    return list(schedule_errors())


@register("django_jobs")
def check_disabled(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Note (Info) that jobs are disabled, what enqueue does meanwhile, and how to enable them."""
    if settings_errors() or get_settings().enabled:
        return []
    mode = get_settings().when_disabled
    return [
        Info(
            f"Jobs are disabled: JOBS['REDIS_URL'] is not set, so no worker runs, schedules "
            f"do not fire, and enqueue follows JOBS['WHEN_DISABLED'] ({mode!r}).",
            hint="Set JOBS['REDIS_URL'] (for example redis://127.0.0.1:6379/0) to enable jobs; "
            "add 'django_jobs.I001' to SILENCED_SYSTEM_CHECKS to hide this note.",
            id="django_jobs.I001",
        )
    ]


@register(Tags.database)
def check_database_connections(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Warn when one worker may hold as many connections as PostgreSQL allows in all.

    A database check: it runs with `migrate` and `check --database default`, not on every
    command, because it asks the database.
    """
    if not databases or settings_errors():
        return []
    concurrency = raw_settings()["CONCURRENCY"]
    warnings: list[CheckMessage] = []
    for alias in databases:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        with connection.cursor() as cursor:
            cursor.execute("SHOW max_connections")
            (row,) = cursor.fetchall()
        allowed = int(row[0])
        if concurrency >= allowed:
            warnings.append(
                Warning(
                    f"JOBS['CONCURRENCY'] is {concurrency}: one worker may hold {concurrency} "
                    f"connections to database {alias!r}, which allows {allowed} in all.",
                    hint="Lower CONCURRENCY, raise max_connections, or put a pooler "
                    "(PgBouncer) in front; count every worker and web process.",
                    id="django_jobs.W001",
                )
            )
    return warnings


#: Seconds without a relay's heartbeat after which W002 warns (a relay beats every 5 seconds).
RELAY_STALE = 120


@register(Tags.database)
def check_outbox_relayed(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Warn when JOBS["OUTBOX"] is on and no worker has relayed the outbox lately: rows that
    the fast path could not send would wait for ever. A database check, like W001."""
    if not databases or settings_errors() or not get_settings().outbox:
        return []
    if not get_settings().enabled:
        return []
    warnings: list[CheckMessage] = []
    for alias in databases:
        try:
            beat = last_relay(alias)
        except DatabaseError:
            continue  # not migrated yet: migrate creates the table, the workers the row
        if beat is None or beat.relayed_at is None:
            what = "no worker has ever relayed it"
        else:
            age = (timezone.now() - beat.relayed_at).total_seconds()
            if age <= RELAY_STALE:
                continue
            what = f"worker {beat.worker} relayed it last, {age:.0f}s ago"
        warnings.append(
            Warning(
                f"JOBS['OUTBOX'] is on, but the outbox of database {alias!r} is not being "
                f"relayed: {what}.",
                hint="Start `manage.py runworker` (every worker relays the outbox); until then "
                "jobs whose enqueue found Redis down wait in the outbox.",
                id="django_jobs.W002",
            )
        )
    return warnings
