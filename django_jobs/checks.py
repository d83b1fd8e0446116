"""System checks for django-jobs: every bad JOBS value is an error with an id and a hint.

| id                  | problem                                                        |
|---------------------|----------------------------------------------------------------|
| django_jobs.E001    | JOBS is not a dict                                             |
| django_jobs.E002    | JOBS has a key django-jobs does not know (a typo?)             |
| django_jobs.E003    | REDIS_URL is not a redis://, rediss:// or unix:// URL          |
| django_jobs.E004    | NAMESPACE is empty or holds characters that break key names    |
| django_jobs.E005    | QUEUES is empty, not a list of names, or repeats a name        |
| django_jobs.E006    | a duration is not a positive number of seconds or timedelta    |
| django_jobs.E007    | a count is not a positive integer                              |
| django_jobs.E008    | WHEN_DISABLED is not inline, skip or raise                     |
| django_jobs.E009    | SCHEDULE is not a dict of entries                              |
| django_jobs.E010    | HEARTBEAT_INTERVAL is not shorter than LEASE                   |
| django_jobs.E011    | two job classes share one registered name                      |
| django_jobs.E012    | a job class default (queue, attempts, timeout...) is invalid   |
| django_jobs.E013    | EMAIL_BACKEND is not a dotted path, or is the queued backend   |
| django_jobs.E014    | EMAIL_QUEUE is not one of QUEUES                               |
| django_jobs.E015    | queued mail has no real backend: a queued mailer names itself, |
|                     | a queued mailer or a missing alias (in django_jobs/mail/checks) |
| django_jobs.W001    | one worker's connections reach PostgreSQL's max_connections    |
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from django_jobs.conf import (
    COUNTS,
    DEFAULTS,
    DURATIONS,
    WHEN_DISABLED_CHOICES,
    ZERO_ALLOWED,
    raw_settings,
)

REDIS_SCHEMES = ("redis", "rediss", "unix")
#: The dotted path of django_jobs.mail.QueuedEmailBackend (named, not imported: layers).
QUEUED_BACKEND = "django_jobs.mail.QueuedEmailBackend"
#: The mail jobs: they run on JOBS["EMAIL_QUEUE"] (checked as E014), not on their class queue.
EMAIL_JOBS = frozenset({"django_jobs.DeliverEmail", "django_jobs.SendEmail"})
DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
#: Names used inside Redis keys: no braces (hash tags), colons (separators) or whitespace.
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _error(id_: int, msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"django_jobs.E{id_:03d}")


def _check_redis_url(value: Any) -> list[Error]:
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        return [
            _error(
                3,
                f"JOBS['REDIS_URL'] must be a string, not {type(value).__name__}.",
                "Use a URL such as redis://127.0.0.1:6379/0, or None to disable jobs.",
            )
        ]
    scheme = urlsplit(value).scheme
    if scheme not in REDIS_SCHEMES:
        shown = value.split("@")[-1] if "@" in value else value
        return [
            _error(
                3,
                f"JOBS['REDIS_URL'] has scheme {scheme or '(none)'!r} ({shown!r}).",
                "Use redis://host:port/db, rediss:// for TLS or unix:///path/to/socket.",
            )
        ]
    return []


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(NAME_RE.match(value))


def _check_namespace(value: Any) -> list[Error]:
    if _is_name(value):
        return []
    return [
        _error(
            4,
            f"JOBS['NAMESPACE'] is {value!r}, not a usable key prefix.",
            "Use a short name of letters, digits, '_', '-' or '.', such as 'jobs'.",
        )
    ]


def _check_queues(value: Any) -> list[Error]:
    hint = "Use a list of names in priority order, such as ['critical', 'default', 'low']."
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        return [_error(5, f"JOBS['QUEUES'] is {value!r}, not a non-empty list of names.", hint)]
    bad = [q for q in value if not _is_name(q)]
    if bad:
        return [
            _error(
                5,
                f"JOBS['QUEUES'] holds invalid queue names: {bad!r}.",
                "Queue names are letters, digits, '_', '-' or '.' (no ':', '{' or '}').",
            )
        ]
    repeated = sorted({q for q in value if list(value).count(q) > 1})
    if repeated:
        return [
            _error(
                5,
                f"JOBS['QUEUES'] repeats {', '.join(repeated)}.",
                "List each queue once, in priority order.",
            )
        ]
    return []


def is_valid_duration(value: Any, zero_ok: bool = False) -> bool:
    """Whether value is a duration in seconds (number or timedelta) above (or at) zero."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        return False
    return seconds >= 0 if zero_ok else seconds > 0


def is_valid_count(value: Any, zero_ok: bool = False) -> bool:
    """Whether value is an int above (or at) zero."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return value >= 0 if zero_ok else value > 0


def _check_numbers(raw: dict[str, Any]) -> list[Error]:
    errors = []
    for key in sorted(DURATIONS):
        zero_ok = key in ZERO_ALLOWED
        if not is_valid_duration(raw[key], zero_ok):
            least = "zero or more" if zero_ok else "more than zero"
            errors.append(
                _error(
                    6,
                    f"JOBS[{key!r}] is {raw[key]!r}, not a duration.",
                    f"Use a number of seconds ({least}) or a timedelta; "
                    f"the default is {DEFAULTS[key]}.",
                )
            )
    for key in sorted(COUNTS):
        zero_ok = key in ZERO_ALLOWED
        if not is_valid_count(raw[key], zero_ok):
            least = "0 or more" if zero_ok else "1 or more"
            errors.append(
                _error(
                    7,
                    f"JOBS[{key!r}] is {raw[key]!r}, not a count.",
                    f"Use a whole number, {least}; the default is {DEFAULTS[key]}.",
                )
            )
    return errors


def settings_errors() -> list[Error]:
    """Return every problem with the JOBS setting (empty when it is valid)."""
    raw = raw_settings()
    if "__invalid__" in raw:
        return [
            _error(
                1,
                f"JOBS must be a dict, not {type(raw['__invalid__']).__name__}.",
                "Set JOBS = {'REDIS_URL': ...} in settings.py, or leave it out.",
            )
        ]
    errors: list[Error] = []
    for key in raw:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(key, DEFAULTS, n=1)
            did_you_mean = f"Did you mean {close[0]!r}? " if close else ""
            errors.append(
                _error(
                    2,
                    f"JOBS has an unknown key {key!r}.",
                    f"{did_you_mean}Known keys: {', '.join(DEFAULTS)}.",
                )
            )
    errors += _check_redis_url(raw["REDIS_URL"])
    errors += _check_namespace(raw["NAMESPACE"])
    errors += _check_queues(raw["QUEUES"])
    errors += _check_numbers(raw)
    if raw["WHEN_DISABLED"] not in WHEN_DISABLED_CHOICES:
        errors.append(
            _error(
                8,
                f"JOBS['WHEN_DISABLED'] is {raw['WHEN_DISABLED']!r}.",
                f"Use one of {', '.join(WHEN_DISABLED_CHOICES)}.",
            )
        )
    if not isinstance(raw["SCHEDULE"], dict):
        errors.append(
            _error(
                9,
                f"JOBS['SCHEDULE'] is {type(raw['SCHEDULE']).__name__}.",
                "Use a dict of entry name -> {'job': ..., 'cron': ...}.",
            )
        )
    errors += _check_email(raw)
    beat, lease = raw["HEARTBEAT_INTERVAL"], raw["LEASE"]
    if is_valid_duration(beat) and is_valid_duration(lease):
        seconds = [v.total_seconds() if isinstance(v, timedelta) else v for v in (beat, lease)]
        if seconds[0] >= seconds[1]:
            errors.append(
                _error(
                    10,
                    f"JOBS['HEARTBEAT_INTERVAL'] ({beat}) is not shorter "
                    f"than JOBS['LEASE'] ({lease}).",
                    "Leases would expire between heartbeats and running tasks "
                    "would be handed to other workers; keep the interval at a "
                    "third of the lease or less.",
                )
            )
    return errors


def _check_email(raw: dict[str, Any]) -> list[Error]:
    errors = []
    backend = raw["EMAIL_BACKEND"]
    if backend is not None and not (isinstance(backend, str) and DOTTED_RE.match(backend)):
        errors.append(
            _error(
                13,
                f"JOBS['EMAIL_BACKEND'] is {backend!r}, not a dotted path to an email backend.",
                "Name the backend that really sends, such as "
                "'django.core.mail.backends.smtp.EmailBackend', or leave it out.",
            )
        )
    elif backend == QUEUED_BACKEND:
        errors.append(
            _error(
                13,
                "JOBS['EMAIL_BACKEND'] is the queued backend itself: every mail would be "
                "queued again by the worker and never sent.",
                "Set EMAIL_BACKEND = 'django_jobs.mail.QueuedEmailBackend' and "
                "JOBS['EMAIL_BACKEND'] to the backend that really sends (SMTP, ...).",
            )
        )
    queues = raw["QUEUES"]
    # Checked here when set; the default is checked by the mail checks when mail is queued.
    explicit = "EMAIL_QUEUE" in getattr(django_settings, "JOBS", {})
    if explicit and isinstance(queues, Sequence) and raw["EMAIL_QUEUE"] not in queues:
        errors.append(
            _error(
                14,
                f"JOBS['EMAIL_QUEUE'] is {raw['EMAIL_QUEUE']!r}, not one of JOBS['QUEUES'].",
                "Use one of the configured queues (the default is 'critical'), or add it to "
                "JOBS['QUEUES'].",
            )
        )
    return errors


@register("django_jobs")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check the JOBS setting."""
    return list(settings_errors())


@register("django_jobs")
def check_jobs(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the registered job classes: unique names and valid class defaults."""
    from django_jobs.jobs import registry

    errors: list[CheckMessage] = []
    for name, paths in sorted(registry.conflicts.items()):
        errors.append(
            _error(
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
        if job.queue not in queues and name not in EMAIL_JOBS:
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
                _error(
                    12,
                    f"Job {name!r}: {problem}.",
                    "Fix the class attribute, or leave it out to use the JOBS default.",
                )
            )
    return errors


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
