from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings

from django_jobs.checks import check_settings


def ids(jobs: Any) -> list[str]:
    with override_settings(JOBS=jobs):
        return [message.id or "" for message in check_settings()]


@pytest.mark.parametrize(
    "jobs",
    [
        {},
        {"REDIS_URL": "redis://127.0.0.1:6379/0"},
        {"REDIS_URL": "rediss://:secret@example.com:6380/1"},
        {"REDIS_URL": "unix:///run/redis.sock"},
        {"REDIS_URL": None, "WHEN_DISABLED": "skip"},
        {"QUEUES": ["high", "low"], "TIMEOUT": timedelta(seconds=30), "RETENTION": 0},
        {"MAX_TASKS_PER_CHILD": 0, "LEASE": 3, "HEARTBEAT_INTERVAL": 1},
    ],
)
def test_check_settings__valid_settings_pass(jobs: dict[str, Any]) -> None:
    assert ids(jobs) == []


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        (["not", "a", "dict"], ["django_jobs.E001"]),
        ({"QUEUE": ["a"]}, ["django_jobs.E002"]),
        ({"REDIS_URL": "http://localhost:6379"}, ["django_jobs.E003"]),
        ({"REDIS_URL": "localhost:6379"}, ["django_jobs.E003"]),
        ({"REDIS_URL": 6379}, ["django_jobs.E003"]),
        ({"NAMESPACE": ""}, ["django_jobs.E004"]),
        ({"NAMESPACE": "a{b}"}, ["django_jobs.E004"]),
        ({"QUEUES": []}, ["django_jobs.E005"]),
        ({"QUEUES": "default"}, ["django_jobs.E005"]),
        ({"QUEUES": ["a", "a"]}, ["django_jobs.E005"]),
        ({"QUEUES": ["has:colon"]}, ["django_jobs.E005"]),
        ({"TIMEOUT": -5}, ["django_jobs.E006"]),
        ({"TIMEOUT": 0}, ["django_jobs.E006"]),
        ({"TIMEOUT": "300"}, ["django_jobs.E006"]),
        ({"RETENTION": -1}, ["django_jobs.E006"]),
        ({"CONCURRENCY": 0}, ["django_jobs.E007"]),
        ({"MAX_ATTEMPTS": 2.5}, ["django_jobs.E007"]),
        ({"MAX_ATTEMPTS": True}, ["django_jobs.E007"]),
        ({"WHEN_DISABLED": "later"}, ["django_jobs.E008"]),
        ({"FLOW_REPLAY_LEASE": 10, "FLOW_REPLAY_RENEW": 10}, ["django_jobs.E041"]),
        ({"FLOWS_NAMESPACE": "default"}, ["django_jobs.E040"]),
        ({"FLOWS_NAMESPACE": "a:b"}, ["django_jobs.E040"]),
        ({"ENQUEUE_ON_COMMIT": 1}, ["django_jobs.E016"]),
        ({"LEASE": 10, "HEARTBEAT_INTERVAL": 10}, ["django_jobs.E010"]),
    ],
)
def test_check_settings__each_bad_value_has_its_id(jobs: Any, expected: list[str]) -> None:
    assert ids(jobs) == expected


def test_check_settings__every_error_has_a_hint() -> None:
    bad = {"QUEUE": 1, "REDIS_URL": "http://x", "TIMEOUT": -1, "CONCURRENCY": 0}
    with override_settings(JOBS=bad):
        messages = check_settings()
    assert len(messages) == 4
    assert all(message.hint for message in messages)


def test_check_settings__unknown_key_suggests_the_close_one() -> None:
    with override_settings(JOBS={"MAX_ATEMPTS": 3}):
        (message,) = check_settings()
    assert "Did you mean 'MAX_ATTEMPTS'?" in (message.hint or "")


def test_check_settings__redis_url_password_is_not_echoed() -> None:
    with override_settings(JOBS={"REDIS_URL": "http://user:hunter2@host:6379"}):
        (message,) = check_settings()
    assert "hunter2" not in message.msg


@pytest.mark.django_db
def test_check_database_connections__warns_past_max_connections() -> None:
    from django.db import connection

    from django_jobs.checks import check_database_connections

    with override_settings(JOBS={"CONCURRENCY": 1_000_000}):
        messages = check_database_connections(databases=["default"])
    with override_settings(JOBS={"CONCURRENCY": 2}):
        quiet = check_database_connections(databases=["default"])

    # PostgreSQL reports its limit; SQLite has none to exceed.
    expected = ["django_jobs.W001"] if connection.vendor == "postgresql" else []
    assert [m.id for m in messages] == expected
    assert quiet == []


@pytest.mark.parametrize(
    "url",
    [
        "http://host:6379/0?password=hunter2",
        "localhost:6379?password=hunter2",
        "http://user:hunter2@host:6379",
        "sentinel://:hunter2@host:26379",
    ],
)
def test_check_settings__unknown_scheme_url_is_redacted(url: str) -> None:
    with override_settings(JOBS={"REDIS_URL": url}):
        (message,) = check_settings()
    assert message.id == "django_jobs.E003"
    assert "hunter2" not in message.msg
    assert "host" in message.msg
