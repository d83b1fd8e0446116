"""With REDIS_URL unset, schedules are off: `runworker` says so in one log line and nothing
connects (every socket connect fails), though the schedules are still checked."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from django.core.management import call_command

from django_jobs.checks import check_schedules

SCHEDULE = {"sync": {"job": "probes.Noop", "every": 30, "payload": {"n": 1}}}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: socket.socket, *args: Any) -> None:
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def test_runworker__without_redis_schedules_are_off_in_one_line(
    settings: Any, no_network: None, caplog: pytest.LogCaptureFixture
) -> None:
    settings.JOBS = {"SCHEDULE": SCHEDULE}
    with caplog.at_level(logging.INFO, "django_jobs"):
        call_command("runworker")
    lines = [r.getMessage() for r in caplog.records if "Schedules are off" in r.getMessage()]
    assert len(lines) == 1
    assert "1 configured schedule" in lines[0]


def test_check_schedules__without_redis_checks_and_connects_nothing(
    settings: Any, no_network: None
) -> None:
    settings.JOBS = {"SCHEDULE": {"sync": {**SCHEDULE["sync"], "queue": "nowhere"}}}
    assert [m.id for m in check_schedules()] == ["django_jobs.E025"]
