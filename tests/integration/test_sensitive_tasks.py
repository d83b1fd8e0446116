"""`@task(sensitive=True)`: a Django task's arguments are shown redacted in the admin and the API
(it runs as the job SensitiveDjangoTask), the function still gets them and get_result reads
them; a normal task's arguments are shown."""

from __future__ import annotations

import html
import json
from typing import Any

import django
import pytest

pytest.importorskip(
    "django.tasks", reason="Django's tasks framework (django.tasks) needs Django 6.0 or later"
)

from django.contrib.auth.models import User
from django.tasks import TaskResultStatus, task_backends
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs.conf.redact import REDACTED
from django_jobs.tasks import JobsBackend
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace

if django.VERSION >= (6, 1):
    from django.tasks import task as with_options
else:
    from django_jobs.tasks import task as with_options

pytestmark = pytest.mark.django_db

SECRET = "ada@example.com"
received: list[Any] = []


@with_options(sensitive=True)
def private(email: str, *, note: str = "") -> str:
    received.append((email, note))
    return "sent"


@with_options()
def public(email: str) -> str:
    return "sent"


@pytest.fixture
def backend(redis_ns: RedisNamespace) -> JobsBackend:
    received.clear()
    b = task_backends["default"]
    assert isinstance(b, JobsBackend)
    return b


def superuser() -> User:
    return User.objects.create_user("ada", is_staff=True, is_superuser=True)


def test_sensitive_task__arguments_redacted_in_admin_and_api(backend: JobsBackend) -> None:
    hidden = private.enqueue(SECRET, note=SECRET)
    shown = public.enqueue(SECRET)
    admin, api = Client(), APIClient()
    admin.force_login(user := superuser())
    api.force_login(user)

    page = html.unescape(
        admin.get(reverse("admin:django_jobs_task_change", args=["default", hidden.id])).text
    )
    normal = html.unescape(
        admin.get(reverse("admin:django_jobs_task_change", args=["default", shown.id])).text
    )
    detail = api.get(f"/api/v1/admin/jobs/{hidden.id}").json()

    assert SECRET not in page
    assert REDACTED in page
    assert f"{__name__}.private (@task)" in page  # the function is named, not its arguments
    assert SECRET in normal
    assert detail["payload"] == REDACTED
    assert SECRET not in json.dumps(detail)


def test_sensitive_task__runs_with_its_arguments_and_its_result_is_read(
    backend: JobsBackend,
) -> None:
    result = private.enqueue(SECRET, note="hi")

    run_burst()
    result.refresh()

    assert received == [(SECRET, "hi")]
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "sent"
    assert result.args == [SECRET]


def test_sensitive_task__an_argument_json_cannot_hold_is_not_quoted(backend: JobsBackend) -> None:
    with pytest.raises(TypeError) as hidden:
        private.enqueue({1: SECRET})
    with pytest.raises(TypeError) as shown:
        public.enqueue({1: SECRET})

    assert SECRET not in str(hidden.value)
    assert SECRET in str(shown.value)
