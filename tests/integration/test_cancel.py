"""Cancel from Python, the admin, the API and the CLI (issue 21), on the real Redis.

The worker side (a running handler seeing JobCanceled, the grace kill) runs real worker
processes: tests/acceptance/test_cancel_worker.py.
"""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

import django_jobs
from django_jobs import CancelOutcome, JobCanceled
from django_jobs.client import get_broker
from django_jobs.exceptions import JobCanceled as JobCanceledToo
from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from django_jobs.testing import run_burst
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace
from tests.integration.test_admin import login, make_user, notes, text
from tests.integration.test_broker import held
from tests.integration.test_cli_jobs import jobs, jobs_json
from tests.integration.test_inspector import Fails, Noop, Note, depths

BASE = "/api/v1/admin/jobs"


def state(task_id: str, queue: str = "default") -> str | None:
    info = get_inspector().task(queue, task_id)
    return info.state if info is not None else None


def running() -> str:
    """A task taken by a worker (dequeued): active, under epoch 1."""
    handle = Noop.enqueue(Note("long"))
    delivery = get_broker().dequeue(["default"])
    assert delivery is not None
    assert delivery.id == handle.id
    return handle.id


# -- Python ---------------------------------------------------------------------------------


def test_job_canceled__is_exported_from_the_package_and_exceptions() -> None:
    assert JobCanceled is JobCanceledToo
    assert issubclass(JobCanceled, django_jobs.JobsError)
    assert "JobCanceled" in django_jobs.__all__
    assert "cancel" in django_jobs.__all__


def test_cancel__a_pending_task_never_runs(redis_ns: RedisNamespace) -> None:
    handle = Noop.enqueue(Note("a"))

    assert django_jobs.cancel(handle.id) is CancelOutcome.CANCELED

    assert run_burst() == []
    assert state(handle.id) == State.CANCELED
    assert depths(get_inspector())[State.CANCELED] == 1
    assert get_inspector().task("default", handle.id).canceled_at is not None  # type: ignore[union-attr]


def test_handle_cancel__a_scheduled_task_and_its_state(redis_ns: RedisNamespace) -> None:
    handle = Noop.enqueue(Note("later"), delay=3600, queue="low")

    assert handle.cancel() is CancelOutcome.CANCELED

    assert handle.state == State.CANCELED
    assert handle.refresh() == State.CANCELED
    # Asked again: it has ended.
    assert handle.cancel() is CancelOutcome.FINISHED


def test_cancel__a_retrying_task(redis_ns: RedisNamespace) -> None:
    handle = Fails.enqueue(Note("x"), max_attempts=3)
    run_burst()
    assert handle.refresh() == State.RETRY

    assert django_jobs.cancel(handle.id) is CancelOutcome.CANCELED

    info = get_inspector().task("default", handle.id)
    assert info is not None
    assert (info.state, info.attempts, info.error) == (State.CANCELED, 1, "RuntimeError: boom x")


def test_cancel__ended_and_unknown_tasks_answer_without_raising(redis_ns: RedisNamespace) -> None:
    done = Noop.enqueue(Note("done"))
    dead = Fails.enqueue(Note("dead"))
    run_burst()

    assert django_jobs.cancel(done.id) is CancelOutcome.FINISHED
    assert django_jobs.cancel(dead.id) is CancelOutcome.FINISHED
    assert django_jobs.cancel("0" * 32) is CancelOutcome.NOT_FOUND
    assert (state(done.id), state(dead.id)) == (State.COMPLETED, State.DEAD)
    with pytest.raises(ValueError, match="a task id is a non-empty str"):
        django_jobs.cancel("")


def test_cancel__a_running_task_is_asked_to_stop_at_the_heartbeat(
    redis_ns: RedisNamespace,
) -> None:
    task_id = running()
    asked: list[str] = []
    runs = [held(task_id, "1")]
    beat = Heartbeat(get_broker(), "w1", {}, lambda: runs, on_cancel=lambda d: asked.append(d.id))

    beat.tick()
    assert asked == []
    assert django_jobs.cancel(task_id) is CancelOutcome.REQUESTED
    beat.tick()
    beat.tick()  # reported once per run

    assert asked == [task_id]
    assert state(task_id) == State.ACTIVE  # it runs until its run stops


# -- the admin ------------------------------------------------------------------------------


@pytest.fixture
def staff(db: None) -> Client:
    return login(make_user("operator", "view_task", "change_task", "delete_task"))


def test_admin__task_page_cancels_a_pending_task(redis_ns: RedisNamespace, staff: Client) -> None:
    handle = Noop.enqueue(Note("a"))
    page = reverse("admin:django_jobs_task_change", args=["default", handle.id])
    cancel = reverse("admin:django_jobs_task_cancel", args=["default", handle.id])
    assert cancel in staff.get(page).content.decode()

    response = staff.post(cancel, follow=True)

    assert notes(response) == [f"Task {handle.id} is canceled (it was pending): it will not run."]
    assert "State: canceled" in text(response)
    assert cancel not in response.content.decode()  # no second cancel offered
    assert state(handle.id) == State.CANCELED


def test_admin__running_task_is_asked_to_stop(redis_ns: RedisNamespace, staff: Client) -> None:
    task_id = running()
    cancel = reverse("admin:django_jobs_task_cancel", args=["default", task_id])

    response = staff.post(cancel, follow=True)

    assert "is running: it is asked to stop" in notes(response)[0]
    assert "Cancel requested:" in text(response)
    assert cancel not in response.content.decode()


def test_admin__bulk_cancel_of_ticked_tasks(redis_ns: RedisNamespace, staff: Client) -> None:
    done = Fails.enqueue(Note("dead"))
    run_burst()
    task_id = running()
    waiting = [Noop.enqueue(Note(str(n))).id for n in range(2)]
    listing = reverse("admin:django_jobs_task_changelist") + "?state=pending"
    assert "cancel_selected" in staff.get(listing).content.decode()

    response = staff.post(
        listing,
        {"action": "cancel_selected", "_selected_action": [*waiting, task_id, done.id]},
        follow=True,
    )

    (note,) = notes(response)
    assert note.startswith("Canceled 2 tasks. Asked 1 running task to stop")
    assert [state(t) for t in waiting] == [State.CANCELED, State.CANCELED]
    assert state(task_id) == State.ACTIVE


def test_admin__cancel_needs_change_task_and_csrf(redis_ns: RedisNamespace, db: None) -> None:
    handle = Noop.enqueue(Note("a"))
    cancel = reverse("admin:django_jobs_task_cancel", args=["default", handle.id])
    viewer = login(make_user("viewer", "view_task"))
    page = reverse("admin:django_jobs_task_change", args=["default", handle.id])
    assert cancel not in viewer.get(page).content.decode()

    assert viewer.post(cancel).status_code == 403
    listing = reverse("admin:django_jobs_task_changelist")
    bulk = {"action": "cancel_selected", "_selected_action": [handle.id]}
    assert viewer.post(listing, bulk).status_code == 403
    no_csrf = login(make_user("operator", "change_task"), enforce_csrf_checks=True)
    assert no_csrf.post(cancel).status_code == 403

    assert state(handle.id) == State.PENDING


def test_admin__canceled_tasks_are_listed(redis_ns: RedisNamespace, staff: Client) -> None:
    handle = Noop.enqueue(Note("a"))
    django_jobs.cancel(handle.id)

    response = staff.get(reverse("admin:django_jobs_task_changelist") + "?state=canceled")

    assert handle.id in response.content.decode()
    assert "1 canceled task in every queue" in text(response)


# -- the API --------------------------------------------------------------------------------


@pytest.fixture
def api(staff: Client, redis_ns: RedisNamespace) -> APIClient:
    client = APIClient()
    client.force_login(User.objects.get(username="operator"))
    return client


def test_api__cancel_a_pending_task(api: APIClient) -> None:
    handle = Noop.enqueue(Note("a"))

    response = api.post(f"{BASE}/{handle.id}/cancel")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["outcome"], body["task"]["state"]) == ("canceled", "canceled")
    assert body["task"]["canceled_at"] is not None
    assert body["detail"] == f"Task {handle.id} is canceled (it was pending): it will not run."


def test_api__cancel_a_running_task(api: APIClient) -> None:
    task_id = running()

    body = api.post(f"{BASE}/{task_id}/cancel").json()

    assert (body["outcome"], body["task"]["state"]) == ("requested", "active")
    assert body["task"]["cancel_requested_at"] is not None


def test_api__cancel_of_an_ended_unknown_or_malformed_id(api: APIClient) -> None:
    dead = Fails.enqueue(Note("dead"))
    run_burst()

    ended = api.post(f"{BASE}/{dead.id}/cancel")
    assert ended.status_code == 409
    assert ended.json() == {
        "detail": f"Task {dead.id} had already ended (dead): nothing to cancel.",
        "state": "dead",
    }
    assert api.post(f"{BASE}/{'0' * 32}/cancel").status_code == 404
    assert api.post(f"{BASE}/nope/cancel").status_code == 400


def test_api__cancel_needs_change_task(redis_ns: RedisNamespace, db: None) -> None:
    handle = Noop.enqueue(Note("a"))
    client = APIClient()
    client.force_login(make_user("viewer", "view_task"))

    response = client.post(f"{BASE}/{handle.id}/cancel")

    assert response.status_code == 403
    assert list(response.json()) == ["detail"]
    assert state(handle.id) == State.PENDING


def test_api__overview_and_listing_count_canceled(api: APIClient) -> None:
    handle = Noop.enqueue(Note("a"))
    django_jobs.cancel(handle.id)

    (default,) = [q for q in api.get(BASE).json()["queues"] if q["name"] == "default"]
    listed = api.get(f"{BASE}/tasks?state=canceled").json()

    assert default["canceled"] == 1
    assert [task["id"] for task in listed["results"]] == [handle.id]


# -- the CLI --------------------------------------------------------------------------------


def test_cli_cancel__a_pending_task_with_yes_and_json(redis_ns: RedisNamespace) -> None:
    handle = Noop.enqueue(Note("a"))

    assert jobs_json("cancel", handle.id, "--yes") == {
        "id": handle.id, "queue": "default", "outcome": "canceled", "state": "pending",
    }  # fmt: skip
    assert state(handle.id) == State.CANCELED


def test_cli_cancel__asks_first_and_says_what_it_did(redis_ns: RedisNamespace) -> None:
    handle = Noop.enqueue(Note("a"))
    with pytest.raises(CommandError, match=r"Not asked: stdin is not a terminal\. Pass --yes"):
        jobs("cancel", handle.id)
    assert state(handle.id) == State.PENDING

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, err = jobs("cancel", handle.id, stdin=Terminal("y\n"))

    assert f"Cancel the pending task {handle.id} (" in err
    assert out == f"Task {handle.id} is canceled (it was pending): it will not run.\n"


def test_cli_cancel__running_ended_and_unknown(redis_ns: RedisNamespace) -> None:
    task_id = running()
    assert jobs_json("cancel", task_id, "--yes")["outcome"] == "requested"
    dead = Fails.enqueue(Note("dead"))
    run_burst()

    with pytest.raises(CommandError, match=r"had already ended \(dead\): nothing to cancel"):
        jobs("cancel", dead.id, "--yes")
    out = io.StringIO()
    with pytest.raises(CommandError):
        jobs("cancel", dead.id, "--yes", "--json", stdout=out)
    assert json.loads(out.getvalue())["outcome"] == "finished"
    with pytest.raises(CommandError, match=f"No task {'0' * 32} in any queue"):
        jobs("cancel", "0" * 32, "--yes")
    with pytest.raises(CommandError, match="is not a task id"):
        jobs("cancel", "nope", "--yes")


def test_cli_stats__counts_canceled(redis_ns: RedisNamespace, db: None) -> None:
    django_jobs.cancel(Noop.enqueue(Note("a")).id)

    (default,) = [q for q in jobs_json("stats")["queues"] if q["name"] == "default"]

    assert default["canceled"] == 1
    assert "CANCELED" in jobs("stats")[0]


def test_cli_ls__lists_canceled(redis_ns: RedisNamespace) -> None:
    handle = Noop.enqueue(Note("a"))
    django_jobs.cancel(handle.id)

    assert [row["id"] for row in jobs_json("ls", "canceled")["tasks"]] == [handle.id]
