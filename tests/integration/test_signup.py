"""The demo's sign-up: the welcome mail leaves the request path, through the queued backend."""

from typing import Any

import pytest
from django.core import mail
from django.test import Client

from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace
from tests.mailing import queue_mail

FORM = {"username": "ada", "email": "ada@example.com", "password1": "a-long-pass-phrase",
        "password2": "a-long-pass-phrase"}  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_signup__welcome_mail_is_a_job(
    redis_ns: RedisNamespace, settings: Any, mailoutbox: Any
) -> None:
    queue_mail(settings)  # as testproject/settings.py does (the test run swaps in locmem)

    response = Client().post("/signup/", FORM)

    assert response.status_code == 302
    assert mail.outbox == []  # the request did not send it
    outcomes = run_burst()
    assert [(o.job, o.state) for o in outcomes] == [("django_jobs.DeliverEmail", "completed")]
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]


@pytest.mark.django_db(transaction=True)
def test_signup__without_redis_the_mail_is_sent_inline(settings: Any, mailoutbox: Any) -> None:
    queue_mail(settings)
    settings.JOBS = {**settings.JOBS, "REDIS_URL": None}

    Client().post("/signup/", FORM)

    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
