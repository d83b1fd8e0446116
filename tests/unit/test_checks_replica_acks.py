"""The checks of JOBS["REPLICA_ACKS"] and JOBS["REPLICA_ACKS_TIMEOUT"] (issue 20)."""

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf import get_settings


def ids(jobs: dict[str, Any]) -> list[str]:
    with override_settings(JOBS=jobs):
        return [message.id or "" for message in check_settings()]


def test_replica_acks__off_by_default() -> None:
    with override_settings(JOBS={}):
        settings = get_settings()
    assert (settings.replica_acks, settings.replica_acks_timeout) == (0, 1.0)


@pytest.mark.parametrize(
    "jobs",
    [
        {"REPLICA_ACKS": 1},
        {"REPLICA_ACKS": 2, "REPLICA_ACKS_TIMEOUT": timedelta(milliseconds=500)},
        {"REPLICA_ACKS": 1, "REPLICA_ACKS_TIMEOUT": 4, "ENQUEUE_TIMEOUT": 10},
        {"REPLICA_ACKS": 0, "REPLICA_ACKS_TIMEOUT": 30},  # off: the timeout is not used
    ],
)
def test_replica_acks__valid_settings_pass(jobs: dict[str, Any]) -> None:
    assert ids(jobs) == []


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ({"REPLICA_ACKS": -1}, ["django_jobs.E007"]),
        ({"REPLICA_ACKS": True}, ["django_jobs.E007"]),
        ({"REPLICA_ACKS": "1"}, ["django_jobs.E007"]),
        ({"REPLICA_ACKS": 1, "REPLICA_ACKS_TIMEOUT": 0}, ["django_jobs.E006"]),
        ({"REPLICA_ACKS": 1, "REPLICA_ACKS_TIMEOUT": 2.5}, ["django_jobs.E050"]),
        (
            {"REPLICA_ACKS": 1, "REPLICA_ACKS_TIMEOUT": 3, "ENQUEUE_TIMEOUT": timedelta(seconds=5)},
            ["django_jobs.E050"],
        ),
    ],
)
def test_replica_acks__each_bad_value_has_its_id(jobs: dict[str, Any], expected: list[str]) -> None:
    assert ids(jobs) == expected


def test_replica_acks__timeout_past_the_read_budget_says_what_to_do() -> None:
    with override_settings(JOBS={"REPLICA_ACKS": 1, "REPLICA_ACKS_TIMEOUT": 5}):
        (error,) = check_settings()
    assert "not shorter than half of JOBS['ENQUEUE_TIMEOUT'] (5)" in error.msg
    assert "keep REPLICA_ACKS_TIMEOUT under half of it" in (error.hint or "")
