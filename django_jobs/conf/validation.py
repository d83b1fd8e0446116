"""Every problem with the JOBS setting, as Django check errors with an id and a hint.

Beside the table of defaults it checks, below both `django_jobs.conf` (whose get_settings raises
these errors as ImproperlyConfigured) and `django_jobs.checks` (which reports them at start-up).
The ids are listed in `django_jobs.checks`.
"""

from __future__ import annotations

import difflib
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings as django_settings
from django.core.checks import Error
from redis.connection import parse_url

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
from django_jobs.conf.queues import check_queues, error, is_name, queue_names
from django_jobs.conf.redact import redact
from django_jobs.conf.redis_url import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    parse_cluster_url,
    parse_sentinel_url,
)

DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _check_redis_url(value: Any) -> list[Error]:
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        return [
            error(
                3,
                f"JOBS['REDIS_URL'] must be a string, not {type(value).__name__}.",
                "Use a URL such as redis://127.0.0.1:6379/0, or None to disable jobs.",
            )
        ]
    scheme = urlsplit(value).scheme
    if scheme not in (*REDIS_SCHEMES, *SENTINEL_SCHEMES, *CLUSTER_SCHEMES):
        shown = redact(value)
        return [
            error(
                3,
                f"JOBS['REDIS_URL'] has scheme {scheme or '(none)'!r} ({shown!r}).",
                "Use redis://host:port/db, rediss:// for TLS, unix:///path/to/socket, "
                "redis+sentinel://host:26379,host2:26379/<service>/<db> or "
                "redis+cluster://host:6379,host2:6379 (a Redis Cluster); rediss+sentinel:// "
                "and rediss+cluster:// for TLS.",
            )
        ]
    try:
        if scheme in SENTINEL_SCHEMES:
            parse_sentinel_url(value)
        elif scheme in CLUSTER_SCHEMES:
            parse_cluster_url(value)
        else:
            parse_url(value)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        # redis-py's message may quote the password ("could not be cast ... as 'pw'"): cut it.
        return [
            error(
                3,
                f"JOBS['REDIS_URL'] cannot be parsed ({redact(value)}): "
                f"{str(exc).split(' as ')[0]}.",
                "Percent-encode a password holding '/', '?', '#' or '@' "
                "(urllib.parse.quote(password, safe='')).",
            )
        ]
    return []


def _check_namespace(value: Any) -> list[Error]:
    if is_name(value):
        return []
    return [
        error(
            4,
            f"JOBS['NAMESPACE'] is {value!r}, not a usable key prefix.",
            "Use a short name of letters, digits, '_', '-' or '.', such as 'jobs'.",
        )
    ]


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


#: (check id, keys, validator, what it is, "use ..." with {least}, least if 0 is allowed, else).
NUMBERS = (
    (6, DURATIONS, is_valid_duration, "a duration",
     "Use a number of seconds ({least}) or a timedelta", "zero or more", "more than zero"),
    (7, COUNTS, is_valid_count, "a count", "Use a whole number, {least}", "0 or more", "1 or more"),
)  # fmt: skip


def _check_numbers(raw: dict[str, Any]) -> list[Error]:
    errors = []
    for id_, keys, valid, kind, use, zero, positive in NUMBERS:
        for key in sorted(keys):
            zero_ok = key in ZERO_ALLOWED
            if not valid(raw[key], zero_ok):
                hint = use.format(least=zero if zero_ok else positive)
                errors.append(
                    error(
                        id_,
                        f"JOBS[{key!r}] is {raw[key]!r}, not {kind}.",
                        f"{hint}; the default is {DEFAULTS[key]}.",
                    )
                )
    return errors


def settings_errors() -> list[Error]:
    """Return every problem with the JOBS setting (empty when it is valid)."""
    raw = raw_settings()
    if "__invalid__" in raw:
        return [
            error(
                1,
                f"JOBS must be a dict, not {type(raw['__invalid__']).__name__}.",
                "Set JOBS = {'REDIS_URL': ...} in settings.py, or leave it out.",
            )
        ]
    errors: list[Error] = []
    for key in raw:
        if key in NOT_BUILT:
            errors.append(
                error(
                    2,
                    f"JOBS has the key {key!r}, for {NOT_BUILT[key]}, which this release of "
                    f"django-jobs does not have yet: nothing would read it.",
                    f"Remove {key!r} from JOBS until a release with {NOT_BUILT[key]}.",
                )
            )
        elif key not in DEFAULTS:
            close = difflib.get_close_matches(key, DEFAULTS, n=1)
            did_you_mean = f"Did you mean {close[0]!r}? " if close else ""
            errors.append(
                error(
                    2,
                    f"JOBS has an unknown key {key!r}.",
                    f"{did_you_mean}Known keys: {', '.join(DEFAULTS)}.",
                )
            )
    errors += _check_redis_url(raw["REDIS_URL"])
    errors += _check_namespace(raw["NAMESPACE"])
    errors += check_queues(raw["QUEUES"])
    errors += _check_numbers(raw)
    if raw["WHEN_DISABLED"] not in WHEN_DISABLED_CHOICES:
        errors.append(
            error(
                8,
                f"JOBS['WHEN_DISABLED'] is {raw['WHEN_DISABLED']!r}.",
                f"Use one of {', '.join(WHEN_DISABLED_CHOICES)}.",
            )
        )
    for key in sorted(FLAGS):
        if not isinstance(raw[key], bool):
            errors.append(
                error(
                    16,
                    f"JOBS[{key!r}] is {raw[key]!r}, not True or False.",
                    f"Use True or False; the default is {DEFAULTS[key]}.",
                )
            )
    errors += _check_replica_acks(raw)
    errors += _check_email(raw)
    errors += _check_flows(raw)
    errors += _check_throttle(raw["API_THROTTLE_RATE"])
    beat, lease = raw["HEARTBEAT_INTERVAL"], raw["LEASE"]
    if is_valid_duration(beat) and is_valid_duration(lease):
        seconds = [v.total_seconds() if isinstance(v, timedelta) else v for v in (beat, lease)]
        if seconds[0] >= seconds[1]:
            errors.append(
                error(
                    10,
                    f"JOBS['HEARTBEAT_INTERVAL'] ({beat}) is not shorter "
                    f"than JOBS['LEASE'] ({lease}).",
                    "Leases would expire between heartbeats and running tasks "
                    "would be handed to other workers; keep the interval at a "
                    "third of the lease or less.",
                )
            )
    return errors


def _check_replica_acks(raw: dict[str, Any]) -> list[Error]:
    """An enqueue reads WAIT's answer within half of ENQUEUE_TIMEOUT (the read budget of a
    call: see broker.factory.connect), so the replicas' timeout must fit in it."""
    acks, wait, budget = raw["REPLICA_ACKS"], raw["REPLICA_ACKS_TIMEOUT"], raw["ENQUEUE_TIMEOUT"]
    if not (is_valid_count(acks) and is_valid_duration(wait) and is_valid_duration(budget)):
        return []
    seconds = [v.total_seconds() if isinstance(v, timedelta) else v for v in (wait, budget)]
    if seconds[0] < seconds[1] / 2:
        return []
    return [
        error(
            50,
            f"JOBS['REPLICA_ACKS_TIMEOUT'] ({wait}) is not shorter than half of "
            f"JOBS['ENQUEUE_TIMEOUT'] ({budget}).",
            "An enqueue reads the replicas' answer within half of ENQUEUE_TIMEOUT, so it would "
            "give up first with BrokerUnavailable; keep REPLICA_ACKS_TIMEOUT under half of it "
            "(the defaults: 1 and 5), or raise ENQUEUE_TIMEOUT.",
        )
    ]


def _check_flows(raw: dict[str, Any]) -> list[Error]:
    """FLOWS_NAMESPACE names a queue pair of its own; the replay lease outlives its renewals."""
    errors = []
    ns, queues = raw["FLOWS_NAMESPACE"], queue_names(raw["QUEUES"])
    if not is_name(ns):
        errors.append(
            error(
                40,
                f"JOBS['FLOWS_NAMESPACE'] is {ns!r}, not a usable queue name.",
                "Use a short name of letters, digits, '_', '-' or '.', such as 'flows'.",
            )
        )
    elif {ns, f"{ns}_critical"} & set(queues):
        errors.append(
            error(
                40,
                f"JOBS['FLOWS_NAMESPACE'] {ns!r} names the queues {ns!r} and {ns + '_critical'!r}"
                f", and one of them is already in JOBS['QUEUES'].",
                "Give flows a namespace of their own: jobs and flow events must not share a queue.",
            )
        )
    renew, lease = raw["FLOW_REPLAY_RENEW"], raw["FLOW_REPLAY_LEASE"]
    if is_valid_duration(renew) and is_valid_duration(lease):
        seconds = [v.total_seconds() if isinstance(v, timedelta) else v for v in (renew, lease)]
        if seconds[0] >= seconds[1]:
            errors.append(
                error(
                    41,
                    f"JOBS['FLOW_REPLAY_RENEW'] ({renew}) is not shorter than "
                    f"JOBS['FLOW_REPLAY_LEASE'] ({lease}).",
                    "A replay lease would expire between renewals and two workers could replay "
                    "one flow at once; keep the renewal at a third of the lease or less.",
                )
            )
    return errors


def _check_email(raw: dict[str, Any]) -> list[Error]:
    errors = []
    backend = raw["EMAIL_BACKEND"]
    if backend is not None and not (isinstance(backend, str) and DOTTED_RE.match(backend)):
        errors.append(
            error(
                13,
                f"JOBS['EMAIL_BACKEND'] is {backend!r}, not a dotted path to an email backend.",
                "Name the backend that really sends, such as "
                "'django.core.mail.backends.smtp.EmailBackend', or leave it out.",
            )
        )
    elif backend == QUEUED_BACKEND:
        errors.append(
            error(
                13,
                "JOBS['EMAIL_BACKEND'] is the queued backend itself: every mail would be "
                "queued again by the worker and never sent.",
                "Set EMAIL_BACKEND = 'django_jobs.mail.QueuedEmailBackend' and "
                "JOBS['EMAIL_BACKEND'] to the backend that really sends (SMTP, ...).",
            )
        )
    queues = queue_names(raw["QUEUES"])
    # Checked here when set; the default is checked by the mail checks when mail is queued.
    explicit = "EMAIL_QUEUE" in getattr(django_settings, "JOBS", {})
    if explicit and queues and raw["EMAIL_QUEUE"] not in queues:
        errors.append(
            error(
                14,
                f"JOBS['EMAIL_QUEUE'] is {raw['EMAIL_QUEUE']!r}, not one of JOBS['QUEUES'].",
                "Use one of the configured queues (the default is 'critical'), or add it to "
                "JOBS['QUEUES'].",
            )
        )
    return errors


#: A DRF throttle rate: requests per second, minute, hour or day (DRF reads the unit's first
#: letter).
THROTTLE_RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


def _check_throttle(value: Any) -> list[Error]:
    if value is None or (isinstance(value, str) and THROTTLE_RATE.fullmatch(value)):
        return []
    return [
        error(
            17,
            f"JOBS['API_THROTTLE_RATE'] is {value!r}, not a rate.",
            "Use requests per unit as DRF writes them, such as '600/minute' or '20/second' "
            "(units: second, minute, hour, day), or None for no throttle; the default is "
            f"{DEFAULTS['API_THROTTLE_RATE']!r}.",
        )
    ]
