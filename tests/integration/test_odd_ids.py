"""Ids django-jobs never writes (by hand, or another program in our namespace: "/", "?", "%",
HTML, spaces, an id ending in "/retry") are listed on every admin and API page, each link of
the admin leads to its own page, and the admin deletes them; schedule names with "/" work in
the API's URLs, and the names a URL could not tell apart are refused at definition."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs import keys
from django_jobs.inspector import get_inspector
from tests.conftest import RedisNamespace
from tests.integration.test_api import BASE, Noop

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:django_jobs_task_changelist")
ODD = ["x/retry", "x/delete", "a b", "x?y#z&w", "100%", "<b>id</b>", "é", "a_2Fb", "tab\tid"]


@pytest.fixture
def staff(admin_client: Client) -> Client:
    return admin_client


@pytest.fixture
def api(admin_user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def write_odd(ns: RedisNamespace) -> None:
    """Dead entries with odd ids: every other one with a record, the rest without."""
    pipe = ns.client.pipeline()
    for n, task_id in enumerate(ODD):
        pipe.zadd(f"{ns.namespace}:{{default}}:dead", {task_id: 1e9 + n})
        if n % 2 == 0:
            pipe.hset(f"{ns.namespace}:{{default}}:t:{task_id}",
                      mapping={"state": "dead", "msg": "not json", "died_at": 1e9 + n})  # fmt: skip
    pipe.execute()


def links(page: str) -> dict[str, str]:
    """Each task id of a tasks list, and its link."""
    return {
        html.unescape(title): html.unescape(href)
        for href, title in re.findall(
            r'<th class="field-id"[^>]*><a href="([^"]*)" title="([^"]*)"', page
        )
    }


def test_odd_ids__every_admin_page_renders_them_and_delete_removes_them(
    redis_ns: RedisNamespace, staff: Client
) -> None:
    write_odd(redis_ns)

    for query in ({"state": "dead"}, {"state": "dead", "queue": "default"}):
        listing = staff.get(TASKS, query)
        assert listing.status_code == 200, query
        assert set(links(listing.content.decode())) == set(ODD), query
    found = links(staff.get(TASKS, {"state": "dead"}).content.decode())
    assert "<b>id</b>" not in staff.get(TASKS, {"state": "dead"}).content.decode()  # escaped
    for task_id, link in found.items():
        page = staff.get(link)
        assert page.status_code == 200, task_id
        assert html.escape(task_id) in page.content.decode(), task_id
        confirm = staff.get(link + "delete/")
        assert confirm.status_code == 200, task_id
        assert staff.post(link + "delete/", {"state": "dead"}).status_code == 302, task_id

    assert redis_ns.client.zcard(f"{redis_ns.namespace}:{{default}}:dead") == 0
    assert not [k for k in redis_ns.keys() if ":t:" in k]


def test_odd_ids__the_admin_search_finds_them_and_ticked_ones_are_deleted(
    redis_ns: RedisNamespace, staff: Client
) -> None:
    write_odd(redis_ns)

    found = staff.get(TASKS, {"q": "x/retry"})
    ticked = {"action": "delete_selected", "_selected_action": ODD, "post": "yes"}
    deleted = staff.post(f"{TASKS}?state=dead", ticked)

    assert links(found.content.decode()) == {"x/retry": links(found.content.decode())["x/retry"]}
    assert deleted.status_code == 302
    assert redis_ns.client.zcard(f"{redis_ns.namespace}:{{default}}:dead") == 0


def test_odd_ids__a_worker_running_one_links_to_its_page(
    redis_ns: RedisNamespace, staff: Client
) -> None:
    write_odd(redis_ns)
    ns = redis_ns.namespace
    redis_ns.client.zadd(keys.workers(ns), {"host:1": 2e9})
    redis_ns.client.hset(keys.worker(ns, "host:1"), mapping={
        "host": "host", "pid": 1, "queues": "default", "concurrency": 1,
        "tasks": json.dumps([{"id": "x/retry", "queue": "default"}]),
    })  # fmt: skip

    page = staff.get(reverse("admin:django_jobs_worker_changelist")).content.decode()
    (link,) = re.findall(r'<a href="([^"]*/default/[^"]*)"', page)

    assert staff.get(html.unescape(link)).status_code == 200
    assert "x/retry" in staff.get(html.unescape(link)).content.decode()


def test_odd_ids__the_api_lists_them_and_refuses_them_by_id_with_a_reason(
    redis_ns: RedisNamespace, api: APIClient
) -> None:
    write_odd(redis_ns)

    failed = api.get(f"{BASE}/failed?per_page=100")
    listed = {task["id"]: task for task in failed.json()["results"]}

    assert failed.status_code == 200
    assert set(listed) == set(ODD)
    assert all(listed[i]["error"] or listed[i]["decode_error"] for i in ODD)
    for task_id in ODD:
        answer = api.get(f"{BASE}/{task_id.replace('/', '%2F')}")
        assert answer.status_code in (400, 404, 405), task_id  # 405: "x/retry" is a retry URL
        said = answer.json()
        assert said.get("detail") or said.get("task_id"), task_id


@pytest.fixture
def slashed(redis_ns: RedisNamespace, settings: Any) -> str:
    name = "reports/daily"
    entry = {"job": Noop.name, "every": 60, "payload": {"text": "r"}}
    settings.JOBS = {**settings.JOBS, "SCHEDULE": {name: entry}}
    return name


def test_schedules__a_name_with_a_slash_works_in_the_api(slashed: str, api: APIClient) -> None:
    one = api.get(f"{BASE}/schedules/{slashed}")
    run = api.post(f"{BASE}/schedules/{slashed}/run")
    paused = api.post(f"{BASE}/schedules/{slashed}/pause")
    resumed = api.post(f"{BASE}/schedules/{slashed}/resume")

    assert [r.status_code for r in (one, run, paused, resumed)] == [200, 200, 200, 200]
    assert one.json()["name"] == slashed
    assert (paused.json()["paused"], resumed.json()["paused"]) == (True, False)
    assert get_inspector().schedule(slashed).last_task_id == run.json()["task_id"]


def test_schedules__a_name_with_a_slash_works_in_the_admin(slashed: str, staff: Client) -> None:
    page = reverse("admin:django_jobs_schedule_change", args=[slashed])

    assert staff.get(page).status_code == 200
    assert staff.post(reverse("admin:django_jobs_schedule_run", args=[slashed])).status_code == 302


@pytest.mark.parametrize("name", ["daily/run", "x/pause", "x/resume", "/x", "x/", "a//b", "a\nb"])
def test_schedules__a_name_no_url_can_tell_apart_is_refused_at_definition(
    redis_ns: RedisNamespace, settings: Any, name: str
) -> None:
    settings.JOBS = {**settings.JOBS, "SCHEDULE": {name: {"job": Noop.name, "every": 60}}}

    errors = [e for e in run_checks() if e.id == "django_jobs.E028"]

    assert len(errors) == 1
    assert repr(name) in errors[0].msg
    assert "/" in (errors[0].hint or "")
