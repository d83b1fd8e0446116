"""The outbox where operators look: the admin's Queues page (even with Redis down, when the
outbox fills) and the API overview."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from rest_framework.test import APIClient

from django_jobs import Job
from django_jobs.models import OutboxJob, OutboxRelay
from tests.conftest import RedisNamespace, RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Page:
    n: int


class Visit(Job[Page]):
    def run(self, payload: Page) -> None:
        pass


def test_queues_page__shows_the_outbox_with_redis_down(
    private_redis: RedisServer, settings: Any, admin_user: AbstractUser
) -> None:
    settings.JOBS = {"REDIS_URL": private_redis.url, "OUTBOX": True, "ENQUEUE_TIMEOUT": 1}
    private_redis.stop()
    Visit.enqueue_many([Page(1), Page(2)])
    OutboxJob.objects.filter(pk=OutboxJob.objects.order_by("pk")[0].pk).update(
        attempts=2, last_error="queue 'gone' is not in JOBS['QUEUES'] of worker w"
    )
    client = Client()
    client.force_login(admin_user)

    response = client.get("/admin/django_jobs/queue/")

    assert response.status_code == 503  # Redis cannot be read ...
    page = response.content.decode()
    assert "2</strong> jobs waiting to be sent to Redis" in page  # ... the outbox can
    assert "No worker has relayed the outbox yet" in page
    assert "1 job could not be sent and waits for a retry" in page
    assert "&#x27;gone&#x27; is not in JOBS[&#x27;QUEUES&#x27;]" in page


def test_queues_page__no_outbox_block_when_off_and_empty(
    redis_ns: RedisNamespace, admin_user: AbstractUser
) -> None:
    client = Client()
    client.force_login(admin_user)

    response = client.get("/admin/django_jobs/queue/")

    assert response.status_code == 200
    assert 'id="jobs-outbox"' not in response.content.decode()


def test_api_overview__includes_the_outbox(
    redis_ns: RedisNamespace, admin_user: AbstractUser
) -> None:
    OutboxJob.objects.create(job_id="a" * 32, job=Visit.name, queue="default", message="{}")
    OutboxRelay.objects.create(worker="host:1:abc")
    api = APIClient()
    api.force_login(admin_user)

    body = api.get("/api/v1/admin/jobs").json()

    outbox = body["outbox"]
    assert outbox["rows"] == 1
    assert outbox["oldest_age"] >= 0
    assert outbox["held"] == 0
    assert outbox["relayed_by"] == "host:1:abc"


def test_queues_page__says_who_relayed_last_in_utc(
    redis_ns: RedisNamespace, settings: Any, admin_user: AbstractUser
) -> None:
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    settings.TIME_ZONE = "Europe/Paris"
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    OutboxRelay.objects.create(worker="host:1:abc", relayed_at=at)
    client = Client()
    client.force_login(admin_user)

    page = client.get("/admin/django_jobs/queue/").content.decode()

    assert "0</strong> jobs waiting to be sent to Redis." in page
    assert "Last relayed by worker host:1:abc at 2026-01-02 03:04:05 UTC." in page
