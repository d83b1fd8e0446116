"""The configured schedules: JOBS["SCHEDULE"] and the job classes' `schedule` attributes,
checked (`schedule_errors`, one system check error per bad entry, naming it) and resolved
(`get_schedules`). Nothing here talks to Redis.

| id               | problem                                                          |
|------------------|------------------------------------------------------------------|
| django_jobs.E020 | SCHEDULE is not a dict of dicts, or an entry has an unknown key  |
| django_jobs.E021 | an entry gives both or neither of `cron` and `every`, or a bad `every` |
| django_jobs.E022 | `cron` is not a valid cron expression                            |
| django_jobs.E023 | `job` names no registered job class                              |
| django_jobs.E024 | `payload` does not fit the job's payload dataclass               |
| django_jobs.E025 | `queue` is not one of QUEUES                                     |
| django_jobs.E026 | `timezone` is not a known time zone                              |
| django_jobs.E027 | an option (max_attempts, timeout, retention, catch_up, overlap) is invalid |
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured

from django_jobs.conf import (
    get_settings,
    is_valid_count,
    is_valid_duration,
    raw_settings,
    to_seconds,
)
from django_jobs.conf.queues import queue_names
from django_jobs.exceptions import UnknownJob
from django_jobs.jobs import Job, registry
from django_jobs.message import payload_to_json
from django_jobs.schedules.declare import CATCH_UP, Cron, Every, Schedule

#: The keys a JOBS["SCHEDULE"] entry may have.
ENTRY_KEYS = frozenset(
    {
        "job",
        "cron",
        "every",
        "timezone",
        "payload",
        "queue",
        "max_attempts",
        "timeout",
        "retention",
        "catch_up",
        "overlap",
    }
)
#: The enqueue options an entry may give.
OPTIONS = ("queue", "max_attempts", "timeout", "retention")


def _error(id_: int, name: str, msg: str, hint: str) -> Error:
    return Error(f"JOBS['SCHEDULE'][{name!r}]: {msg}", hint=hint, id=f"django_jobs.E{id_:03d}")


def _class_entries() -> dict[str, dict[str, Any]]:
    """An entry per job class that declares `schedule`, named after the job."""
    entries: dict[str, dict[str, Any]] = {}
    for name, cls in sorted(registry.jobs.items()):
        declared = getattr(cls, "schedule", None)
        if declared is None:
            continue
        entry: dict[str, Any] = {"job": name, "payload": cls.schedule_payload}
        if isinstance(declared, Cron):
            entry |= {"cron": declared.expression, "timezone": declared.timezone}
        elif isinstance(declared, Every):
            entry["every"] = declared.period
        else:
            entry["every"] = declared  # reported below: neither Cron nor Every
        entries[name] = entry
    return entries


def _entries() -> tuple[dict[str, Any], list[Error]]:
    """Every entry by name (job classes first, settings over them), and E020s."""
    raw = raw_settings().get("SCHEDULE", {})
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return {}, [
            Error(
                f"JOBS['SCHEDULE'] must be a dict of schedule name -> entry, got {raw!r}",
                hint='JOBS["SCHEDULE"] = {"nightly": {"job": "app.Job", "cron": "0 3 * * *"}}',
                id="django_jobs.E020",
            )
        ]
    return {**_class_entries(), **raw}, []


def _payload(name: str, entry: dict[str, Any], job: type[Job[Any]]) -> tuple[Any, list[Error]]:
    payload = entry.get("payload")
    try:
        if payload is None:
            payload = job.payload_type()
        elif isinstance(payload, dict):
            payload = job.payload_type(**payload)
        return payload_to_json(payload, job.payload_type), []
    except Exception as exc:
        fields = ", ".join(f.name for f in dataclasses.fields(job.payload_type))
        return None, [
            _error(
                24,
                name,
                f"the payload does not fit {job.payload_type.__qualname__}: {exc}",
                f"Give `payload` as a dict of its fields ({fields}) or an instance of it, "
                "JSON-serializable.",
            )
        ]


#: The last parts of the admin's and the API's URLs of a schedule's actions.
ACTIONS = ("run", "pause", "resume")


def _name_errors(name: str) -> list[Error]:
    """E028 for a name the admin's and the API's URLs could not tell apart from another's: one
    with "/" at an end or twice in a row, ending in an action ("/run"), or not printable."""
    parts = name.split("/")
    if name.isprintable() and all(parts) and (len(parts) == 1 or parts[-1] not in ACTIONS):
        return []
    return [
        _error(
            28,
            name,
            "a schedule's name is part of its URLs in the admin and the API, and this one would "
            "not be read back as itself",
            "Use printable characters; a '/' only between two parts, and not before a last part "
            f"of {', '.join(ACTIONS)} (which name the actions): 'reports/daily' is fine.",
        )
    ]


def _check_entry(
    name: str, entry: Any, queues: tuple[str, ...]
) -> tuple[Schedule | None, list[Error]]:
    if not isinstance(name, str) or not name or not isinstance(entry, dict):
        return None, [
            _error(
                20,
                str(name),
                f"an entry must be a dict under a name, got {entry!r}",
                'Write {"job": "app.Job", "cron": "0 3 * * *"} or {"job": ..., "every": 30}.',
            )
        ]
    errors: list[Error] = _name_errors(name)
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        errors.append(
            _error(
                20,
                name,
                f"unknown key(s) {', '.join(unknown)}",
                f"An entry may have: {', '.join(sorted(ENTRY_KEYS))}.",
            )
        )
    cron, every = entry.get("cron"), entry.get("every")
    tz = entry.get("timezone", "UTC")
    if (cron is None) == (every is None):
        errors.append(
            _error(
                21,
                name,
                "give exactly one of `cron` and `every`",
                '"cron": "0 3 * * *" (a cron expression) or "every": 30 (seconds or a timedelta).',
            )
        )
    elif every is not None and not (
        isinstance(every, timedelta | int | float)
        and not isinstance(every, bool)
        and is_valid_duration(every)
    ):
        errors.append(
            _error(
                21,
                name,
                f"`every` must be a positive number of seconds or a timedelta, got {every!r}",
                "For example 30, or timedelta(minutes=5).",
            )
        )
    try:
        zone = ZoneInfo(tz) if isinstance(tz, str) and tz else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        errors.append(
            _error(
                26,
                name,
                f"unknown time zone {tz!r}",
                'Use an IANA name such as "Europe/Paris" or "UTC".',
            )
        )
    if cron is not None:
        try:
            if not isinstance(cron, str):
                raise CronSimError("not a string")
            CronSim(cron, datetime.now(zone or UTC))
        except CronSimError as exc:
            errors.append(
                _error(
                    22,
                    name,
                    f"bad cron expression {cron!r}: {exc}",
                    "5 fields (minute hour day month weekday, e.g. '0 3 * * *'), "
                    "or 6 with seconds first.",
                )
            )
    job: type[Job[Any]] | None = None
    try:
        job = registry.get(entry.get("job"))  # type: ignore[arg-type]
    except (UnknownJob, TypeError):
        errors.append(
            _error(
                23,
                name,
                f"unknown job {entry.get('job')!r}",
                "Name a registered job class (its `name`, by default "
                "'<app_label>.<ClassName>'), defined in an app's jobs.py.",
            )
        )
    payload = None
    if job is not None:
        payload, bad = _payload(name, entry, job)
        errors += bad
    queue = entry.get("queue", job.default_queue() if job is not None else None)
    if queue is not None and queue not in queues:
        errors.append(
            _error(
                25,
                name,
                f"unknown queue {queue!r}",
                f"Use one of JOBS['QUEUES']: {', '.join(queues)}.",
            )
        )
    errors += _check_options(name, entry)
    if errors or job is None:
        return None, errors
    options = {key: entry[key] for key in OPTIONS if entry.get(key) is not None}
    for key in ("timeout", "retention"):
        if key in options:
            options[key] = to_seconds(options[key])
    return Schedule(
        name=name,
        job=job.name,
        cron=cron,
        every=None if every is None else to_seconds(every),
        timezone=tz,
        payload=payload or {},
        options=options,
        catch_up=entry.get("catch_up", "one"),
        overlap=entry.get("overlap", True),
    ), []


def _check_options(name: str, entry: dict[str, Any]) -> list[Error]:
    bad: list[str] = []
    if "max_attempts" in entry and not is_valid_count(entry["max_attempts"]):
        bad.append(
            f"max_attempts must be a whole number, 1 or more (got {entry['max_attempts']!r})"
        )
    for key in ("timeout", "retention"):
        if key in entry and not is_valid_duration(entry[key], zero_ok=key == "retention"):
            bad.append(
                f"{key} must be a positive number of seconds or a timedelta (got {entry[key]!r})"
            )
    if entry.get("catch_up", "one") not in CATCH_UP:
        bad.append(f"catch_up must be one of {', '.join(CATCH_UP)} (got {entry['catch_up']!r})")
    if not isinstance(entry.get("overlap", True), bool):
        bad.append(f"overlap must be True or False (got {entry['overlap']!r})")
    return [
        _error(27, name, text, "See the schedule options in docs/schedules.rst.") for text in bad
    ]


def check_schedules(queues: tuple[str, ...]) -> tuple[dict[str, Schedule], list[Error]]:
    """Every valid schedule by name, and an error per bad entry (each naming it)."""
    entries, errors = _entries()
    schedules: dict[str, Schedule] = {}
    for name, entry in entries.items():
        schedule, bad = _check_entry(name, entry, queues)
        errors += bad
        if schedule is not None:
            schedules[name] = schedule
    return schedules, errors


def schedule_errors() -> list[Error]:
    """The system check errors of every bad schedule entry."""
    return check_schedules(tuple(queue_names(raw_settings().get("QUEUES"))))[1]


def get_schedules() -> dict[str, Schedule]:
    """Every configured schedule by name (settings over job classes), validated.

    Raises ImproperlyConfigured with the check messages if an entry is bad.
    """
    schedules, errors = check_schedules(get_settings().queues)
    if errors:
        raise ImproperlyConfigured("; ".join(f"{e.msg} ({e.hint})" for e in errors))
    return schedules
