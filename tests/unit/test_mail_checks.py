"""The mail checks: a queued backend must have a real one to leave through (django_jobs.E015)."""

from typing import Any

import pytest
from django.test import override_settings

from django_jobs.mail.checks import check_mailers

QUEUED = "django_jobs.mail.QueuedEmailBackend"
SMTP = "django.core.mail.backends.smtp.EmailBackend"


def ids(**settings: Any) -> list[str]:
    settings.setdefault("JOBS", {})  # testproject's own JOBS may name a real backend
    with override_settings(**settings):
        return [message.id or "" for message in check_mailers()]


@pytest.mark.parametrize(
    ("mailers", "expected"),
    [
        ({"default": {"BACKEND": SMTP}}, []),
        ({"default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "smtp"}}, "smtp": {}}, []),
        ({"default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "smtp"}}}, ["django_jobs.E015"]),
        ({"default": {"BACKEND": QUEUED}}, ["django_jobs.E015"]),
        ({"default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "default"}}}, ["django_jobs.E015"]),
        (
            {
                "default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "other"}},
                "other": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "default"}},
            },
            ["django_jobs.E015", "django_jobs.E015"],
        ),
    ],
)
def test_check_mailers__a_queued_mailer_needs_a_real_one(
    mailers: dict[str, Any], expected: list[str]
) -> None:
    assert ids(MAILERS=mailers) == expected


def test_check_mailers__the_message_names_the_alias_and_the_hint_the_fix() -> None:
    mailers = {"default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "x"}}}
    with override_settings(MAILERS=mailers, JOBS={}):
        (error,) = check_mailers()
    assert "MAILERS['default']" in error.msg
    assert "'x', which MAILERS lacks" in error.msg
    assert error.hint is not None
    assert '"mailer": "smtp"' in error.hint


@pytest.mark.filterwarnings("ignore:The EMAIL_BACKEND setting is deprecated")
def test_check_mailers__legacy_email_backend_needs_jobs_email_backend(settings: Any) -> None:
    del settings.MAILERS  # the pre-6.1 style
    assert ids(EMAIL_BACKEND=QUEUED) == ["django_jobs.E015"]
    assert ids(EMAIL_BACKEND=QUEUED, JOBS={"EMAIL_BACKEND": SMTP}) == []
    assert ids(EMAIL_BACKEND=SMTP) == []


def test_check_mailers__the_default_email_queue_must_be_configured() -> None:
    mailers = {"default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": "smtp"}}, "smtp": {}}
    assert ids(MAILERS=mailers, JOBS={"QUEUES": ["high", "low"]}) == ["django_jobs.E014"]
    assert ids(MAILERS={"default": {"BACKEND": SMTP}}, JOBS={"QUEUES": ["high"]}) == []


def test_check_jobs__the_mail_jobs_follow_email_queue_not_their_class_queue() -> None:
    from django_jobs.checks import check_jobs

    with override_settings(JOBS={"QUEUES": ["high", "low"], "EMAIL_QUEUE": "high"}):
        flagged = [e.msg for e in check_jobs() if "'django_jobs." in e.msg]
    assert flagged == []
