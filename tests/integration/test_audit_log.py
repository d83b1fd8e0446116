"""Every change asked of the admin or the API is one line on the `django_jobs.audit` logger:
who asked, what (the path), and what came of it, a refusal included; never a payload."""

from __future__ import annotations

import logging

import pytest
from django.test import Client
from rest_framework.test import APIClient

from django_jobs.admin import task_url
from django_jobs.inspector import get_inspector
from tests.conftest import RedisNamespace
from tests.integration.test_api import BASE, Noop, Note, fast_passwords, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures(fast_passwords.__name__)]

SECRET = "payload-text-not-for-logs"


def audited(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "django_jobs.audit"]


def test_audit__an_admin_change_says_who_what_and_how_it_went(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    task = Noop.enqueue(Note(SECRET))
    page = task_url(get_inspector().task("default", task.id))  # type: ignore[arg-type]
    operator, viewer = Client(), Client()
    operator.force_login(make_user("op", staff=True, perms=("view_task", "delete_task")))
    viewer.force_login(make_user("looker", staff=True, perms=("view_task",)))

    with caplog.at_level(logging.INFO, "django_jobs.audit"):
        refused = viewer.post(page + "delete/", {"state": "pending"})
        deleted = operator.post(page + "delete/", {"state": "pending"})

    assert (refused.status_code, deleted.status_code) == (403, 302)
    first, second = audited(caplog)
    assert first.endswith("/delete/' by 'looker': refused, no permission")
    assert f"by 'op': 'Deleted task {task.id}.'" in second
    assert SECRET not in caplog.text


def test_audit__an_api_change_says_who_what_and_the_status(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    task = Noop.enqueue(Note(SECRET))
    operator, viewer = APIClient(), APIClient()
    operator.force_authenticate(make_user("api-op", staff=True, perms=("change_task",)))
    viewer.force_authenticate(make_user("api-looker", staff=True, perms=("view_task",)))

    with caplog.at_level(logging.INFO, "django_jobs.audit"):
        viewer.get(f"{BASE}/{task.id}")  # a read: not a change
        refused = viewer.post(f"{BASE}/queues/default/pause")
        paused = operator.post(f"{BASE}/queues/default/pause")

    assert (refused.status_code, paused.status_code) == (403, 200)
    assert audited(caplog) == [
        f"API POST '{BASE}/queues/default/pause' by 'api-looker': 403",
        f"API POST '{BASE}/queues/default/pause' by 'api-op': 200",
    ]
    assert SECRET not in caplog.text
