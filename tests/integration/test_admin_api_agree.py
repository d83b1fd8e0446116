"""The admin and the API seen from the user's side: they agree on what may be retried, and the
API's paths answer in JSON whatever is typed (a trailing slash, a typo), never Django's HTML
page."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs import Job
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace

pytestmark = pytest.mark.django_db

API = "/api/v1/admin/jobs"


@dataclass
class Note:
    text: str


class Quiet(Job[Note]):
    def run(self, payload: Note) -> None:
        pass


class Doomed(Job[Note]):
    max_attempts = 1

    def run(self, payload: Note) -> None:
        raise RuntimeError("doomed")


class Again(Job[Note]):
    max_attempts = 5

    def run(self, payload: Note) -> None:
        raise RuntimeError("not yet")


@pytest.fixture
def operator(redis_ns: RedisNamespace) -> User:
    user = User.objects.create_user("operator", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_jobs",
            codename__in=["view_task", "change_task", "delete_task"],
        )
    )
    return user


def one_task_in_each_state(queue: str) -> dict[str, str]:
    """A task in every state of the queue, as a user gets them: state -> task id."""
    ids = {State.DEAD: Doomed.enqueue(Note("d"), queue=queue).id}
    run_burst([queue])
    ids[State.RETRY] = Again.enqueue(Note("r"), queue=queue).id
    run_burst([queue])
    ids[State.ACTIVE] = Quiet.enqueue(Note("a"), queue=queue).id
    delivery = get_broker().dequeue([queue])
    assert delivery is not None
    assert delivery.id == ids[State.ACTIVE]
    ids[State.PENDING] = Quiet.enqueue(Note("p"), queue=queue).id
    ids[State.SCHEDULED] = Quiet.enqueue(Note("s"), queue=queue, delay=3600).id
    for state, task_id in ids.items():
        info = get_inspector().task(queue, task_id)
        assert info is not None
        assert info.state == state
    return ids


def test_admin_and_api_agree_on_what_may_be_retried(operator: User) -> None:
    # The same tasks for each surface: the admin's in queue low, the API's in critical.
    for_admin, for_api = one_task_in_each_state("low"), one_task_in_each_state("critical")
    admin, api = Client(), APIClient()
    admin.force_login(operator)
    api.force_login(operator)

    offered, admin_did, api_did = {}, {}, {}
    for state in (State.SCHEDULED, State.PENDING, State.ACTIVE, State.RETRY, State.DEAD):
        page = admin.get(reverse("admin:django_jobs_task_change", args=["low", for_admin[state]]))
        offered[state] = "Retry now" in page.content.decode()
        done = admin.post(
            reverse("admin:django_jobs_task_retry", args=["low", for_admin[state]]), follow=True
        )
        admin_did[state] = any("will run now" in str(m) for m in get_messages(done.wsgi_request))
        answer = api.post(f"{API}/{for_api[state]}/retry")
        assert answer.status_code in (200, 409), answer.content
        api_did[state] = answer.status_code == 200
        if answer.status_code == 409:
            assert answer.json()["state"] == state

    expected = {s: s in (State.RETRY, State.DEAD) for s in offered}
    assert offered == expected
    assert admin_did == expected
    assert api_did == expected
    # And what they did is the same: the retried tasks wait to run, the others did not move.
    for state in expected:
        after = {q: get_inspector().task(q, ids[state]) for q, ids in
                 (("low", for_admin), ("critical", for_api))}  # fmt: skip
        states = {q: info.state if info else None for q, info in after.items()}
        assert states["low"] == states["critical"] == (State.PENDING if expected[state] else state)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/admin/jobs/nope/more",
        "/api/v1/admin/jobs/failed/extra",
        "/api/v1/admin/jobsx",
        "/api/v1/admin/",
        "/api/v1/admin/nothing-here",
    ],
)
def test_api__an_unknown_path_is_a_json_404(operator: User, path: str) -> None:
    api = APIClient()
    api.force_login(operator)

    for response in (api.get(path), api.post(path), APIClient().get(path)):
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        body = response.json()
        assert body["code"] == "not_found"
        assert path in body["detail"]
        assert "no trailing slash" in body["detail"]


@pytest.mark.parametrize("path", ["", "/failed", "/tasks?state=pending", "/schedules"])
def test_api__a_trailing_slash_answers_as_without_it(operator: User, path: str) -> None:
    api = APIClient()
    api.force_login(operator)
    Doomed.enqueue(Note("x"))
    run_burst()
    bare, _, query = path.partition("?")
    slashed = f"{API}{bare}/" + (f"?{query}" if query else "")

    without, with_slash = api.get(API + path), api.get(slashed)

    assert without.status_code == 200
    assert with_slash.status_code == 200
    assert with_slash["Content-Type"] == "application/json"
    assert with_slash.json() == without.json()
    # Signed out, the same refusal in JSON.
    assert APIClient().get(slashed).status_code == 403


def test_api__a_task_s_retry_with_a_trailing_slash_checks_csrf_as_without(operator: User) -> None:
    task_id = Doomed.enqueue(Note("x")).id
    run_burst()
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(operator)

    refused = api.post(f"{API}/{task_id}/retry/")

    assert refused.status_code == 403
    assert re.search("CSRF", refused.json()["detail"])
    assert get_inspector().task("default", task_id).state == State.DEAD  # type: ignore[union-attr]
