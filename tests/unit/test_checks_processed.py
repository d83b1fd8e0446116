"""The settings of processed tasks and mail: PROCESSED_RETENTION, EMAIL_BACKEND, EMAIL_QUEUE."""

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf import get_settings


def ids(jobs: Any) -> list[str]:
    with override_settings(JOBS=jobs):
        return [message.id or "" for message in check_settings()]


def test_processed_retention__defaults_to_30_days() -> None:
    with override_settings(JOBS={}):
        assert get_settings().processed_retention == 30 * 86400


def test_processed_retention__accepts_seconds_or_a_timedelta() -> None:
    with override_settings(JOBS={"PROCESSED_RETENTION": timedelta(days=7)}):
        assert get_settings().processed_retention == 7 * 86400
    assert ids({"PROCESSED_RETENTION": 3600}) == []


@pytest.mark.parametrize("value", [0, -1, "30d", None, True])
def test_check_settings__processed_retention_must_be_a_positive_duration(value: Any) -> None:
    assert ids({"PROCESSED_RETENTION": value}) == ["django_jobs.E006"]


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ({"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}, []),
        ({"EMAIL_BACKEND": "smtp"}, ["django_jobs.E013"]),
        ({"EMAIL_BACKEND": 3}, ["django_jobs.E013"]),
        ({"EMAIL_BACKEND": "django_jobs.mail.QueuedEmailBackend"}, ["django_jobs.E013"]),
        ({"EMAIL_QUEUE": "default"}, []),
        ({"EMAIL_QUEUE": "mail"}, ["django_jobs.E014"]),
        # The default queue is only checked where mail is queued (the mail checks).
        ({"QUEUES": ["high", "low"]}, []),
    ],
)
def test_check_settings__email_settings(jobs: dict[str, Any], expected: list[str]) -> None:
    assert ids(jobs) == expected
