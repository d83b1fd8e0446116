"""The Redis password never reaches text: not the admin's pages and messages, not the API's
answers (JSON and the browsable HTML), not the logs, whether Redis is unreachable or refuses
the password. And the API's browsable pages show hostile task data escaped."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs.client import get_broker
from django_jobs.message import Message, encode
from django_jobs.worker.banner import banner
from tests.conftest import RedisNamespace, RedisServer, free_port

pytestmark = pytest.mark.django_db

SECRET = "pw-Zq81xv"
API = "/api/v1/admin/jobs"
TASK_ID = "a" * 32
ADMIN_GETS = [
    reverse("admin:django_jobs_queue_changelist"),
    reverse("admin:django_jobs_task_changelist"),
    reverse("admin:django_jobs_task_changelist") + "?q=welcome&state=dead",
    reverse("admin:django_jobs_task_change", args=["default", TASK_ID]),
    reverse("admin:django_jobs_task_delete", args=["default", TASK_ID]),
    reverse("admin:django_jobs_worker_changelist"),
    reverse("admin:django_jobs_schedule_changelist"),
    reverse("admin:django_jobs_queue_delete_all_dead", args=["default"]),
    reverse("admin:django_jobs_flowrun_changelist"),
    reverse("admin:django_jobs_flowrun_change", args=["run-1"]),
]
ADMIN_POSTS = [
    reverse("admin:django_jobs_queue_pause", args=["default"]),
    reverse("admin:django_jobs_task_retry", args=["default", TASK_ID]),
    reverse("admin:django_jobs_task_delete", args=["default", TASK_ID]),
    reverse("admin:django_jobs_queue_delete_all_dead", args=["default"]),
    reverse("admin:django_jobs_task_cancel", args=["default", TASK_ID]),
    reverse("admin:django_jobs_flowrun_cancel", args=["run-1"]),
]
API_CALLS = [
    ("get", ""), ("get", "/failed"), ("get", "/tasks?state=dead"), ("get", f"/{TASK_ID}"),
    ("get", "/schedules"), ("post", f"/{TASK_ID}/retry"), ("delete", f"/{TASK_ID}"),
    ("post", "/queues/default/pause"), ("delete", "/queues/default/dead"),
    ("post", f"/{TASK_ID}/cancel"),
]  # fmt: skip
FLOWS_API = "/api/v1/admin/flows"
FLOWS_API_CALLS = [("get", ""), ("get", "/run-1"), ("post", "/run-1/cancel")]


@pytest.fixture
def unreachable(settings: Any) -> str:
    settings.JOBS = {"REDIS_URL": f"redis://user:{SECRET}@127.0.0.1:{free_port()}/0"}
    return "unreachable"


@pytest.fixture
def refused(private_redis: RedisServer, settings: Any) -> str:
    private_redis.client().config_set("requirepass", "the-right-one")
    url = f"redis://:{SECRET}@127.0.0.1:{private_redis.port}/0?password={SECRET}"
    settings.JOBS = {"REDIS_URL": url}
    return "refused"


@pytest.fixture(params=["unreachable", "refused"])
def broken(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


def test_secret__not_on_any_page_answer_or_log_line(
    broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    user = User.objects.create_superuser("root")
    admin = Client(raise_request_exception=False)
    admin.force_login(user)
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(user)
    texts: list[str] = []

    for url in ADMIN_GETS:
        response = admin.get(url)
        assert response.status_code in (200, 503), (url, response.status_code)
        texts.append(response.content.decode())
    for url in ADMIN_POSTS:
        response = admin.post(url, {"state": "dead", "post": "yes"})
        texts += [str(m) for m in get_messages(response.wsgi_request)]
    calls = [(m, f"{API}{p}") for m, p in API_CALLS]
    calls += [(m, f"{FLOWS_API}{p}") for m, p in FLOWS_API_CALLS]
    for method, path in calls:
        for accept in ("application/json", "text/html"):
            response = getattr(api, method)(path, HTTP_ACCEPT=accept)
            assert response.status_code in (200, 400, 404, 503), (method, path)
            texts.append(response.content.decode())

    # A refused password is told as Redis' own words (as an outage, by redis-py's error).
    said = "Redis is unreachable" if broken == "unreachable" else "invalid username-password"
    assert any(said in text for text in texts)  # the outage was met, and said
    for text in texts:
        assert SECRET not in text
    assert caplog.records  # the errors were logged
    for record in caplog.records:
        assert SECRET not in record.getMessage()
    assert SECRET not in caplog.text  # with their tracebacks


def test_browsable_api__shows_hostile_task_data_escaped(redis_ns: RedisNamespace) -> None:
    script = '<script>alert("x")</script>'
    k = get_broker().keys("default")
    message = Message(TASK_ID, script, "default", {script: script}, 1, 30, 60, script)
    redis_ns.client.hset(
        k.task(TASK_ID),
        mapping={"state": "dead", "msg": encode(message), "error": script,
                 "traceback": script, "died_at": time.time()},
    )  # fmt: skip
    redis_ns.client.zadd(k.dead, {TASK_ID: time.time()})
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("root"))

    for path in ("/failed", f"/{TASK_ID}", "/tasks?state=dead"):
        response = api.get(f"{API}{path}", HTTP_ACCEPT="text/html")
        assert response.status_code == 200, path
        body = response.content.decode()
        assert "<script>alert" not in body, path
        assert "&lt;script&gt;" in body, path


def test_secret__not_in_the_worker_banner(unreachable: str) -> None:
    lines = banner(get_broker(), ["default"], 2)

    assert "***" in lines[0]
    assert all(SECRET not in line for line in lines)
