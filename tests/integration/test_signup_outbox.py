"""The demo's sign-up with Redis down: the account is created, the page says the mail will
follow, and the welcome mail arrives once Redis is back and a relay has sent its job.

Real transactions on SQLite or PostgreSQL (DATABASE_URL), a private Redis stopped and started.
"""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection
from django.test import Client

from django_jobs.client import get_broker
from django_jobs.models import OutboxJob
from django_jobs.testing import run_burst
from django_jobs.worker.relay import Relay
from tests.conftest import RedisServer
from tests.mailing import queue_mail

FORM = {"username": "ada", "email": "ada@example.com", "password1": "a-long-pass-phrase",
        "password2": "a-long-pass-phrase"}  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_signup__redis_down_creates_the_user_and_the_mail_follows_when_redis_is_back(
    private_redis: RedisServer, settings: Any, mailoutbox: Any
) -> None:
    settings.JOBS = {"REDIS_URL": private_redis.url, "ENQUEUE_TIMEOUT": 1}
    queue_mail(settings)
    private_redis.stop()

    response = Client().post("/signup/", FORM, follow=True)

    assert response.status_code == 200
    assert "Your welcome mail to ada@example.com will follow" in response.content.decode()
    assert User.objects.filter(username="ada").exists()
    assert list(OutboxJob.objects.values_list("job", flat=True)) == ["django_jobs.DeliverEmail"]
    assert mail.outbox == []
    private_redis.start()
    Relay(get_broker(), "test", fresh=0.0).relay(connection.alias)
    outcomes = run_burst()
    assert [(o.job, o.state) for o in outcomes] == [("django_jobs.DeliverEmail", "completed")]
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert not OutboxJob.objects.exists()
