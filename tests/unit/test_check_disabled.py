"""The Info check that notes the no-Redis mode (django_jobs.I001)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import INFO, CheckMessage, run_checks
from django.test import override_settings


def jobs_messages(jobs: Any) -> list[CheckMessage]:
    with override_settings(JOBS=jobs):
        return [m for m in run_checks(tags=["django_jobs"]) if m.id == "django_jobs.I001"]


@pytest.mark.parametrize("url", [None, ""])
@pytest.mark.parametrize("mode", ["inline", "skip", "raise"])
def test_check_disabled__notes_the_mode_and_how_to_enable_jobs(mode: str, url: str | None) -> None:
    (message,) = jobs_messages({"REDIS_URL": url, "WHEN_DISABLED": mode})

    assert message.level == INFO
    assert "Jobs are disabled" in message.msg
    assert repr(mode) in message.msg
    assert message.hint is not None
    assert "Set JOBS['REDIS_URL']" in message.hint


@pytest.mark.parametrize(
    "jobs",
    [
        {"REDIS_URL": "redis://127.0.0.1:6379/0"},
        # A broken JOBS: its errors say what is wrong, not this note.
        {"REDIS_URL": None, "WHEN_DISABLED": "later"},
    ],
)
def test_check_disabled__silent_with_redis_or_broken_settings(jobs: dict[str, Any]) -> None:
    assert jobs_messages(jobs) == []
