"""The admin's Schedules page and a schedule's page, with Django's test client and real Redis.

Two schedules are configured: "sync" (every 30 s, on queue low) and "nightly" (cron, Paris).
"Run now" enqueues a real task; pause and resume change what the page says and the next fire.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_jobs import Job
from django_jobs.inspector import Inspector, get_inspector
from tests.conftest import RedisNamespace, free_port
from tests.integration.test_admin import login, make_user, notes, text

pytestmark = pytest.mark.django_db

SCHEDULES = reverse("admin:django_jobs_schedule_changelist")


@dataclass
class Account:
    id: int = 0


class SyncAccounts(Job[Account]):
    def run(self, payload: Account) -> None:
        pass


def schedule_url(name: str, action: str = "") -> str:
    return reverse(f"admin:django_jobs_schedule_{action or 'change'}", args=[name])


@pytest.fixture
def insp(redis_ns: RedisNamespace, settings: Any) -> Inspector:
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULE": {
            "sync": {"job": SyncAccounts.name, "every": 30, "payload": {"id": 7}, "queue": "low"},
            "nightly": {"job": SyncAccounts.name, "cron": "0 3 * * *", "timezone": "Europe/Paris"},
        },
    }
    return get_inspector()


@pytest.fixture
def staff() -> Client:
    return login(make_user("operator", "view_task", "change_task"))


@pytest.fixture
def viewer() -> Client:
    return login(make_user("viewer", "view_task"))


def row(response: Any, name: str) -> str:
    """The text of a schedule's row on the Schedules page."""
    body = response.content.decode().replace("<wbr>", "")
    found = re.search(rf'<tr class="jobs-schedule-{name}">(.*?)</tr>', body, re.S)
    assert found is not None, body
    return " ".join(re.sub(r"<[^>]+>", " ", found[1]).split())


def test_schedules_page__lists_every_schedule(staff: Client, insp: Inspector) -> None:
    response = staff.get(SCHEDULES)

    assert response.status_code == 200
    sync, nightly = row(response, "sync"), row(response, "nightly")
    assert SyncAccounts.name in sync
    assert "every 30 seconds" in sync
    assert "UTC" in sync
    assert "never" in sync
    assert "Active" in sync
    assert "0 3 * * *" in nightly
    assert "Europe/Paris" in nightly
    next_fire = insp.schedule("sync").next_fire_at
    assert next_fire is not None
    assert next_fire.strftime("%Y-%m-%d %H:%M:%S") in sync
    body = response.content.decode()
    assert f'href="{schedule_url("sync")}"' in body
    for action in ("run", "pause"):
        assert f'action="{schedule_url("sync", action)}"' in body
    # The index leads here.
    assert f'href="{SCHEDULES}"' in staff.get(reverse("admin:index")).content.decode()


def test_schedules_page__run_now_enqueues_and_the_last_fire_links_to_its_task(
    staff: Client, insp: Inspector
) -> None:
    response = staff.post(schedule_url("sync", "run"))

    assert response.status_code == 302
    assert response["Location"] == SCHEDULES
    info = insp.schedule("sync")
    assert info.last_task_id is not None
    assert info.last_task_queue == "low"
    task = insp.task("low", info.last_task_id)
    assert task is not None
    assert (task.state, task.job, task.payload) == ("pending", SyncAccounts.name, {"id": 7})
    assert notes(response) == [
        f"Schedule sync enqueued task {info.last_task_id} now; its next fire time still fires."
    ]
    page = staff.get(SCHEDULES)
    task_page = reverse("admin:django_jobs_task_change", args=["low", info.last_task_id])
    assert f'href="{task_page}"' in page.content.decode()
    assert "never" not in row(page, "sync")


def test_schedule_page__fire_history_newest_first(staff: Client, insp: Inspector) -> None:
    first = insp.run_schedule_now("nightly")
    second = insp.run_schedule_now("nightly")

    response = staff.get(schedule_url("nightly"))

    assert response.status_code == 200
    body = response.content.decode()
    assert body.index(second) < body.index(first)
    for task_id in (first, second):
        task_page = reverse("admin:django_jobs_task_change", args=["default", task_id])
        assert f'href="{task_page}"' in body
    page = text(response)
    assert "run now" in page
    assert "Europe/Paris" in page
    assert "The last 2 fires" in page


def test_schedule_page__not_fired_yet(staff: Client, insp: Inspector) -> None:
    response = staff.get(schedule_url("sync"))

    assert response.status_code == 200
    assert "This schedule has not fired yet." in text(response)


def test_schedules_page__pause_and_resume(staff: Client, insp: Inspector) -> None:
    paused = staff.post(schedule_url("sync", "pause"))

    assert paused.status_code == 302
    assert insp.schedule("sync").paused
    assert insp.schedule("sync").next_fire_at is None
    assert notes(paused) == [
        "Schedule sync is paused: its fire times pass without a task until resumed."
    ]
    page = staff.get(SCHEDULES)
    assert "Paused" in row(page, "sync")
    assert f'action="{schedule_url("sync", "resume")}"' in page.content.decode()
    assert not insp.schedule("nightly").paused

    resumed = staff.post(schedule_url("sync", "resume") + "?back=schedule")

    assert resumed["Location"] == schedule_url("sync")
    assert not insp.schedule("sync").paused
    assert insp.schedule("sync").next_fire_at is not None


def test_schedules_page__view_only_sees_no_actions_and_may_not_act(
    viewer: Client, insp: Inspector
) -> None:
    page = viewer.get(SCHEDULES)

    assert page.status_code == 200
    assert ">Run now</button>" not in page.content.decode()
    assert ">Pause</button>" not in page.content.decode()
    for action in ("run", "pause", "resume"):
        assert viewer.post(schedule_url("sync", action)).status_code == 403
    assert insp.schedule("sync").last_task_id is None
    assert not insp.schedule("sync").paused


def test_schedules_page__actions_need_post_and_csrf(insp: Inspector) -> None:
    client = login(make_user("careful", "change_task"), enforce_csrf_checks=True)

    assert client.get(schedule_url("sync", "run")).status_code == 405
    assert client.post(schedule_url("sync", "run")).status_code == 403
    assert insp.schedule("sync").last_task_id is None
    page = client.get(SCHEDULES).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    done = client.post(schedule_url("sync", "run"), {"csrfmiddlewaretoken": token[1]})
    assert done.status_code == 302
    assert insp.schedule("sync").last_task_id is not None


def test_schedules_page__unknown_schedule_is_404(staff: Client, insp: Inspector) -> None:
    assert staff.get(schedule_url("gone")).status_code == 404
    for action in ("run", "pause", "resume"):
        assert staff.post(schedule_url("gone", action)).status_code == 404


def test_schedules_page__none_configured(staff: Client, redis_ns: RedisNamespace) -> None:
    response = staff.get(SCHEDULES)

    assert response.status_code == 200
    assert "No schedule is configured" in text(response)


def test_schedules_page__disabled_says_so(staff: Client, settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None}

    for url in (SCHEDULES, schedule_url("sync")):
        response = staff.get(url)
        assert response.status_code == 200
        assert "jobs are disabled (REDIS_URL is not set)" in text(response)
    response = staff.post(schedule_url("sync", "run"))
    assert any("jobs are disabled" in note for note in notes(response))


def test_schedules_page__unreachable_redis_says_so(staff: Client, settings: Any) -> None:
    settings.JOBS = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "ENQUEUE_TIMEOUT": 1,
        "SCHEDULE": {"sync": {"job": SyncAccounts.name, "every": 30}},
    }

    for url in (SCHEDULES, schedule_url("sync")):
        response = staff.get(url)
        assert response.status_code == 503
        assert "Redis is unreachable" in text(response)
    response = staff.post(schedule_url("sync", "pause"))
    assert response.status_code == 302
    assert any("Redis is unreachable" in note for note in notes(response))


def test_schedules_page__a_bad_entry_is_said_not_a_500(
    staff: Client, redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "SCHEDULE": {"broken": {"job": "no.SuchJob", "every": 30}}}

    for url in (SCHEDULES, schedule_url("broken")):
        response = staff.get(url)
        assert response.status_code == 200
        page = text(response)
        assert "The schedules are misconfigured" in page
        assert "unknown job 'no.SuchJob'" in page
        assert "Run manage.py check" in page
    response = staff.post(schedule_url("broken", "run"))
    assert response.status_code == 302
    assert any("The schedules are misconfigured" in note for note in notes(response))
