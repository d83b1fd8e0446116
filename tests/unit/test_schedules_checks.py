"""Every bad schedule entry is a system check error with its id, naming the schedule; none of
this connects to Redis (REDIS_URL stays unset)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs import Cron, Every, Job
from django_jobs.checks import check_schedules
from django_jobs.jobs import registry
from django_jobs.schedules import get_schedules

GOOD = {"job": "probes.Noop", "every": 30, "payload": {"n": 1}}
NOOP = {"job": "probes.Noop", "payload": {"n": 1}}


def ids(schedule: Any) -> list[str]:
    with override_settings(JOBS={"SCHEDULE": schedule}):
        return [m.id or "" for m in check_schedules()]


@pytest.mark.parametrize(
    "entry",
    [
        GOOD,
        {"job": "probes.Noop", "every": timedelta(minutes=5), "payload": {"n": 1}},
        {"job": "probes.Noop", "cron": "0 3 * * *", "timezone": "Europe/Paris",
         "payload": {"n": 1}, "queue": "low", "max_attempts": 2, "timeout": 60,
         "retention": 0, "catch_up": "all", "overlap": False},
        {"job": "probes.Noop", "cron": "*/10 * * * * *", "payload": {"n": 1}},  # seconds
    ],
)  # fmt: skip
def test_check_schedules__a_good_entry_passes(entry: dict[str, Any]) -> None:
    assert ids({"s": entry}) == []


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (["not a dict"], ["django_jobs.E020"]),
        ({"s": "not a dict"}, ["django_jobs.E020"]),
        ({"s": {**GOOD, "cron_expr": "* * * * *"}}, ["django_jobs.E020"]),
        ({"s": {**GOOD, "cron": "0 3 * * *"}}, ["django_jobs.E021"]),  # both
        ({"s": {"job": "probes.Noop", "payload": {"n": 1}}}, ["django_jobs.E021"]),  # neither
        ({"s": {**GOOD, "every": -5}}, ["django_jobs.E021"]),
        ({"s": {**GOOD, "every": "30"}}, ["django_jobs.E021"]),
        ({"s": {**NOOP, "cron": "0 3 * *"}}, ["django_jobs.E022"]),
        ({"s": {**NOOP, "cron": "61 3 * * *"}}, ["django_jobs.E022"]),
        ({"s": {**GOOD, "job": "nope.Missing"}}, ["django_jobs.E023"]),
        ({"s": {**GOOD, "payload": {"m": 1}}}, ["django_jobs.E024"]),
        ({"s": {**GOOD, "payload": {"n": object()}}}, ["django_jobs.E024"]),
        ({"s": {"job": "probes.Noop", "every": 30}}, ["django_jobs.E024"]),  # n has no default
        ({"s": {**GOOD, "queue": "nowhere"}}, ["django_jobs.E025"]),
        ({"s": {**GOOD, "timezone": "Mars/Olympus"}}, ["django_jobs.E026"]),
        ({"s": {**GOOD, "max_attempts": 0}}, ["django_jobs.E027"]),
        ({"s": {**GOOD, "timeout": -1}}, ["django_jobs.E027"]),
        ({"s": {**GOOD, "catch_up": "some"}}, ["django_jobs.E027"]),
        ({"s": {**GOOD, "overlap": "no"}}, ["django_jobs.E027"]),
    ],
)  # fmt: skip
def test_check_schedules__each_bad_entry_has_its_id(schedule: Any, expected: list[str]) -> None:
    assert ids(schedule) == expected


def test_check_schedules__the_message_names_the_schedule_and_has_a_hint() -> None:
    with override_settings(JOBS={"SCHEDULE": {"nightly": {**GOOD, "job": "nope.Missing"}}}):
        (message,) = check_schedules()
    assert "'nightly'" in message.msg
    assert "nope.Missing" in message.msg
    assert message.hint


def test_get_schedules__a_bad_entry_raises_improperly_configured() -> None:
    with (
        override_settings(JOBS={"SCHEDULE": {"s": {**GOOD, "queue": "nowhere"}}}),
        pytest.raises(ImproperlyConfigured, match="nowhere"),
    ):
        get_schedules()


def test_get_schedules__resolves_an_entry() -> None:
    entry = {**GOOD, "queue": "low", "timeout": timedelta(minutes=1), "catch_up": "none"}
    with override_settings(JOBS={"SCHEDULE": {"sync": entry}}):
        sync = get_schedules()["sync"]
    assert (sync.job, sync.every, sync.cron, sync.payload) == ("probes.Noop", 30.0, None, {"n": 1})
    assert sync.options == {"queue": "low", "timeout": 60.0}
    assert (sync.catch_up, sync.overlap, sync.timezone) == ("none", True, "UTC")


@dataclass(frozen=True)
class Report:
    day: str = "today"


@pytest.fixture
def scheduled_jobs() -> Iterator[list[type[Job[Any]]]]:
    """Job classes with a `schedule`, taken out of the registry after the test."""
    made: list[type[Job[Any]]] = []
    yield made
    for cls in made:
        registry.jobs.pop(cls.name, None)


def test_get_schedules__a_job_class_schedule_with_its_default_payload(
    scheduled_jobs: list[type[Job[Any]]],
) -> None:
    class Nightly(Job[Report]):
        name = "tests.Nightly"
        schedule = Cron("0 3 * * *", timezone="Europe/Paris")

    class Often(Job[Report]):
        name = "tests.Often"
        schedule = Every(timedelta(minutes=5))
        schedule_payload = Report(day="yesterday")

    scheduled_jobs += [Nightly, Often]
    with override_settings(JOBS={}):
        found = get_schedules()
    assert found["tests.Nightly"].cron == "0 3 * * *"
    assert found["tests.Nightly"].timezone == "Europe/Paris"
    assert found["tests.Nightly"].payload == {"day": "today"}
    assert (found["tests.Often"].every, found["tests.Often"].payload) == (
        300.0,
        {"day": "yesterday"},
    )


def test_check_schedules__a_job_class_schedule_that_is_bad(
    scheduled_jobs: list[type[Job[Any]]],
) -> None:
    class Broken(Job[Report]):
        name = "tests.Broken"
        schedule = Cron("every night")

    scheduled_jobs.append(Broken)
    with override_settings(JOBS={}):
        assert [m.id for m in check_schedules()] == ["django_jobs.E022"]
