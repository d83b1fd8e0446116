"""The jobs API's schedule endpoints against real Redis: list, one with its fire history, run
now, pause and resume; unknown names, permissions and the disabled mode."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from django_jobs.inspector import Inspector, get_inspector
from tests.conftest import RedisNamespace, free_port
from tests.integration.test_api import BASE, Noop, make_user

SCHEDULES = f"{BASE}/schedules"
#: Every schedule endpoint: (method, path below BASE).
ENDPOINTS = [
    ("get", "/schedules"),
    ("get", "/schedules/sync"),
    ("post", "/schedules/sync/run"),
    ("post", "/schedules/sync/pause"),
    ("post", "/schedules/sync/resume"),
]
FIELDS = {
    "name",
    "job",
    "expression",
    "words",
    "timezone",
    "next_fire_at",
    "last_fire_at",
    "last_task_id",
    "last_task_queue",
    "paused",
}


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def insp(redis_ns: RedisNamespace, settings: Any) -> Inspector:
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULE": {
            "sync": {"job": Noop.name, "every": 30, "payload": {"text": "s"}, "queue": "low"},
            "nightly": {
                "job": Noop.name,
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
                "payload": {"text": "n"},
            },
        },
    }
    return get_inspector()


def client_with(*perms: str) -> APIClient:
    client = APIClient()
    client.force_login(make_user("-".join(perms) or "none", staff=True, perms=perms))
    return client


@pytest.fixture
def api(db: None) -> APIClient:
    return client_with("view_task", "change_task")


def test_schedules__lists_every_schedule_by_name(api: APIClient, insp: Inspector) -> None:
    response = api.get(SCHEDULES)

    assert response.status_code == 200
    nightly, sync = response.json()["results"]
    assert set(sync) == FIELDS
    assert sync["name"] == "sync"
    assert sync["job"] == Noop.name
    assert sync["words"] == "every 30 seconds"
    assert sync["timezone"] == "UTC"
    assert sync["paused"] is False
    assert sync["last_fire_at"] is None
    assert sync["last_task_id"] is None
    next_fire = datetime.fromisoformat(sync["next_fire_at"])
    assert next_fire.timestamp() % 30 == 0
    assert (nightly["name"], nightly["expression"], nightly["timezone"]) == (
        "nightly",
        "0 3 * * *",
        "Europe/Paris",
    )


def test_schedules__none_configured_is_an_empty_list(
    api: APIClient, redis_ns: RedisNamespace
) -> None:
    response = api.get(SCHEDULES)

    assert response.status_code == 200
    assert response.json() == {"results": []}


def test_schedule__run_now_enqueues_and_shows_in_the_history(
    api: APIClient, insp: Inspector
) -> None:
    ran = api.post(f"{SCHEDULES}/sync/run")

    assert ran.status_code == 200
    task_id = ran.json()["task_id"]
    assert ran.json()["schedule"]["last_task_id"] == task_id
    assert ran.json()["schedule"]["last_task_queue"] == "low"
    task = insp.task("low", task_id)
    assert task is not None
    assert (task.state, task.job, task.payload) == ("pending", Noop.name, {"text": "s"})
    second = api.post(f"{SCHEDULES}/sync/run").json()["task_id"]

    detail = api.get(f"{SCHEDULES}/sync")

    assert detail.status_code == 200
    body = detail.json()
    assert set(body) == FIELDS | {"fires"}
    assert [fire["task_id"] for fire in body["fires"]] == [second, task_id]
    assert all(fire["fire_time"] is None for fire in body["fires"])  # run now, no fire time
    assert {fire["queue"] for fire in body["fires"]} == {"low"}


def test_schedule__pause_and_resume(api: APIClient, insp: Inspector) -> None:
    paused = api.post(f"{SCHEDULES}/sync/pause")

    assert paused.status_code == 200
    assert paused.json()["paused"] is True
    assert paused.json()["next_fire_at"] is None
    assert insp.schedule("sync").paused
    assert not insp.schedule("nightly").paused

    resumed = api.post(f"{SCHEDULES}/sync/resume")

    assert resumed.status_code == 200
    assert resumed.json()["paused"] is False
    assert resumed.json()["next_fire_at"] is not None
    assert not insp.schedule("sync").paused


@pytest.mark.parametrize(("method", "path"), ENDPOINTS[1:])
def test_schedule__unknown_name_is_404(
    api: APIClient, insp: Inspector, method: str, path: str
) -> None:
    response = getattr(api, method)(BASE + path.replace("sync", "gone"))

    assert response.status_code == 404
    assert "Unknown schedule 'gone'" in response.json()["detail"]
    assert "nightly" in response.json()["detail"]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS[2:])
def test_schedule__changes_need_change_task(
    db: None, insp: Inspector, method: str, path: str
) -> None:
    viewer = client_with("view_task")

    response = getattr(viewer, method)(BASE + path)

    assert response.status_code == 403
    assert "django_jobs.change_task" in response.json()["detail"]
    assert "run schedules now" in response.json()["detail"]
    assert insp.schedule("sync").last_task_id is None
    assert not insp.schedule("sync").paused


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_schedule__disabled_is_503(api: APIClient, settings: Any, method: str, path: str) -> None:
    settings.JOBS = {"REDIS_URL": None}

    response = getattr(api, method)(BASE + path)

    assert response.status_code == 503
    assert response.json() == {
        "detail": "Jobs are disabled: JOBS['REDIS_URL'] is not set.",
        "code": "jobs_disabled",
    }


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_schedule__unreachable_redis_is_503(
    api: APIClient, settings: Any, method: str, path: str
) -> None:
    settings.JOBS = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "ENQUEUE_TIMEOUT": 1,
        "SCHEDULE": {"sync": {"job": Noop.name, "every": 30, "payload": {"text": "s"}}},
    }

    response = getattr(api, method)(BASE + path)

    assert response.status_code == 503
    assert response.json()["code"] == "broker_unavailable"


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_schedule__a_bad_entry_is_503_saying_what_is_wrong(
    api: APIClient, redis_ns: RedisNamespace, settings: Any, method: str, path: str
) -> None:
    # A deploy that skipped `manage.py check` (gunicorn runs none): an answer, not a 500.
    settings.JOBS = {**settings.JOBS, "SCHEDULE": {"sync": {"job": Noop.name, "every": -5}}}

    response = getattr(api, method)(BASE + path)

    assert response.status_code == 503
    assert response.json()["code"] == "misconfigured"
    assert "'sync'" in response.json()["detail"]
