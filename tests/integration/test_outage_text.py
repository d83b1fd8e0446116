"""What users read during a Redis outage: no password, and a read does not claim it may have
changed something (issue 12, items 5 and 7)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from tests.conftest import free_port

SECRET = "s3cr3t"
APPLIED = "may still have been applied"


@pytest.fixture
def outage(settings: Any) -> None:
    """Redis configured with a password in two forms, at a port where nothing listens."""
    settings.JOBS = {
        "REDIS_URL": f"redis://user:{SECRET}@127.0.0.1:{free_port()}/0?password={SECRET}",
        "ENQUEUE_TIMEOUT": 0.5,
    }


@pytest.fixture
def staff(admin_user: AbstractUser) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize(
    "name",
    [
        "django_jobs_queue_changelist",
        "django_jobs_task_changelist",
        "django_jobs_worker_changelist",
    ],
)
def test_admin_outage__a_read_page_says_nothing_may_have_been_applied(
    outage: None, staff: Client, name: str
) -> None:
    response = staff.get(reverse(f"admin:{name}"))

    page = re.sub(r"\s+", " ", response.content.decode())
    assert response.status_code == 503
    assert "Redis is unreachable" in page
    assert APPLIED not in page
    assert SECRET not in page
    assert "user:***@127.0.0.1" in page


def test_admin_outage__a_change_still_says_it_may_have_been_applied(
    outage: None, staff: Client
) -> None:
    response = staff.post(reverse("admin:django_jobs_queue_pause", args=["default"]), follow=True)

    page = response.content.decode()
    assert APPLIED in page
    assert SECRET not in page


@pytest.mark.parametrize(
    ("method", "path"), [("get", ""), ("get", "/failed"), ("post", "/queues/default/pause")]
)
def test_api_outage__503_body_shows_no_password(
    outage: None, admin_user: AbstractUser, method: str, path: str
) -> None:
    api = APIClient()
    api.force_login(admin_user)

    response = getattr(api, method)(f"/api/v1/admin/jobs{path}")

    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "broker_unavailable"
    assert SECRET not in body["detail"]
    assert (APPLIED in body["detail"]) is (method == "post")
