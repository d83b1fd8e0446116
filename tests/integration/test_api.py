"""The jobs admin API against the real Redis: every endpoint, access rules, and Redis down."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Permission
from django.core.exceptions import ImproperlyConfigured
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_jobs import Job
from django_jobs.api import listing, permissions
from django_jobs.client import JobHandle, get_broker
from django_jobs.inspector import get_inspector
from django_jobs.keys import State, today
from django_jobs.testing import run_burst
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace, free_port

BASE = "/api/v1/admin/jobs"


@dataclass
class Note:
    text: str


class Noop(Job[Note]):
    def run(self, payload: Note) -> None:
        pass


class Fails(Job[Note]):
    max_attempts = 1

    def run(self, payload: Note) -> None:
        raise RuntimeError(f"boom {payload.text}")


class FailsToo(Job[Note]):
    """A second dead-on-first-failure job, for the job filter."""

    max_attempts = 1

    def run(self, payload: Note) -> None:
        raise ValueError(f"bad {payload.text}")


class Flaky(Job[Note]):
    """Fails on its first run and goes to retry (five attempts, backoff of about a second)."""

    max_attempts = 5
    failing: ClassVar[bool] = True

    def run(self, payload: Note) -> None:
        if self.failing:
            raise RuntimeError("not yet")


# -- fixtures and helpers -------------------------------------------------------------------


#: The Task permissions of the Jobs section (models.py): all of them.
EVERY_PERMISSION = ("view_task", "change_task", "delete_task")


def grant(user: AbstractUser, *codenames: str) -> None:
    """Give the user these jobs permissions directly."""
    perms = Permission.objects.filter(content_type__app_label="django_jobs", codename__in=codenames)
    assert perms.count() == len(codenames)
    user.user_permissions.add(*perms)


def make_user(name: str, *, staff: bool, perms: tuple[str, ...] = ()) -> AbstractUser:
    user: AbstractUser = get_user_model().objects.create_user(
        username=name, password="a-long-pass-phrase", is_staff=staff
    )
    grant(user, *perms)
    return user


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def admin_user(db: None) -> AbstractUser:
    """A staff user with every jobs permission, as the admin requires to do everything."""
    return make_user("ada", staff=True, perms=EVERY_PERMISSION)


@pytest.fixture
def api(admin_user: AbstractUser, redis_ns: RedisNamespace) -> APIClient:
    """A client signed in as admin_user (session), with jobs on an isolated namespace."""
    client = APIClient()
    client.force_login(admin_user)
    return client


def dead(job: type[Job[Note]] = Fails, text: str = "x", queue: str = "default") -> str:
    handle = job.enqueue(Note(text), queue=queue)
    run_burst([queue])
    assert handle.refresh() == State.DEAD
    return handle.id


def seed_every_state() -> dict[str, str]:
    """One task per state in the default queue; returns state -> task id."""
    ids = {State.DEAD: dead()}
    ids[State.COMPLETED] = Noop.enqueue(Note("done")).id
    run_burst()
    ids[State.RETRY] = Flaky.enqueue(Note("again")).id
    run_burst()
    ids[State.ACTIVE] = Noop.enqueue(Note("running")).id
    delivery = get_broker().dequeue(["default"])
    assert delivery is not None
    assert delivery.id == ids[State.ACTIVE]
    ids[State.PENDING] = Noop.enqueue(Note("waiting")).id
    ids[State.SCHEDULED] = Noop.enqueue(Note("later"), delay=3600).id
    ids[State.CANCELED] = Noop.enqueue(Note("dropped"), delay=3600).id
    get_broker().cancel("default", ids[State.CANCELED])
    inspector = get_inspector()
    for state, task_id in ids.items():
        info = inspector.find(task_id)
        assert info is not None
        assert info.state == state
    return ids


def result_ids(response: Any) -> list[str]:
    return [item["id"] for item in response.json()["results"]]


def follow(api: APIClient, url: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Follow `next` from url to the end; return every id and every page body."""
    found: list[str] = []
    pages = []
    next_url: str | None = url
    while next_url is not None:
        response = api.get(next_url)
        assert response.status_code == 200, response.json()
        body = response.json()
        pages.append(body)
        found += [item["id"] for item in body["results"]]
        next_url = body["next"]
        assert len(pages) < 100
    return found, pages


# -- GET /api/v1/admin/jobs -----------------------------------------------------------------


def test_overview__reports_depths_counters_paused_and_workers(api: APIClient) -> None:
    # Given one task in every state of "default", and "low" paused ...
    ids = seed_every_state()
    get_inspector().pause("low")
    # ... and a worker whose heartbeat says it runs the active task.
    broker = get_broker()
    delivery = broker.dequeue(["default"])  # the pending one: now two tasks are active
    assert delivery is not None
    info: dict[str, str | int | float] = {
        "host": "box",
        "pid": 4242,
        "queues": "critical,default",
        "concurrency": 4,
        "started": 1_700_000_000.5,
    }
    Heartbeat(broker, "box:4242:abcdef", info, lambda: [delivery]).beat([delivery])

    response = api.get(BASE)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["day"] == today()
    assert [q["name"] for q in body["queues"]] == ["critical", "default", "low"]
    critical, default, low = body["queues"]
    assert default == {
        "name": "default",
        "paused": False,
        "scheduled": 1,
        "pending": 0,
        "parked": 0,
        "active": 2,
        "retry": 1,
        "dead": 1,
        "completed": 1,
        "canceled": 1,
        "processed_today": 1,
        "failed_today": 2,
    }
    assert (critical["paused"], low["paused"], low["dead"]) == (False, True, 0)
    (worker,) = body["workers"]
    assert worker["id"] == "box:4242:abcdef"
    assert (worker["host"], worker["pid"], worker["concurrency"]) == ("box", 4242, 4)
    assert worker["queues"] == ["critical", "default"]
    assert worker["started_at"] == "2023-11-14T22:13:20.500000Z"
    assert worker["last_beat"] is not None
    assert worker["tasks"] == [{"id": delivery.id, "queue": "default", "job": Noop.name}]
    assert delivery.id == ids[State.PENDING]


def test_overview__lists_no_workers_when_none_beat(api: APIClient) -> None:
    response = api.get(BASE)

    assert response.status_code == 200
    assert response.json()["workers"] == []
    assert all(q["pending"] == 0 for q in response.json()["queues"])


# -- GET /api/v1/admin/jobs/failed ----------------------------------------------------------


def test_failed__lists_dead_tasks_of_every_queue_newest_first(api: APIClient) -> None:
    first = dead(text="one", queue="critical")
    second = dead(FailsToo, text="two", queue="low")
    third = dead(text="three", queue="default")
    Noop.enqueue(Note("alive"))

    response = api.get(f"{BASE}/failed")

    assert response.status_code == 200
    body = response.json()
    assert result_ids(response) == [third, second, first]
    assert (body["total"], body["next"], body["next_cursor"]) == (3, None, None)
    item = body["results"][1]
    assert (item["id"], item["queue"], item["state"], item["job"]) == (
        second,
        "low",
        "dead",
        FailsToo.name,
    )
    assert (item["attempts"], item["max_attempts"], item["error"]) == (1, 1, "ValueError: bad two")
    assert item["died_at"] is not None
    assert item["decode_error"] is None
    assert "payload" not in item  # the list is a summary; GET <id> has the rest


def test_failed__filters_by_queue(api: APIClient) -> None:
    dead(queue="critical")
    wanted = dead(queue="low")

    response = api.get(f"{BASE}/failed", {"queue": "low"})

    assert response.status_code == 200
    assert result_ids(response) == [wanted]
    assert response.json()["total"] == 1


def test_failed__filters_by_job_name(api: APIClient) -> None:
    a = dead(FailsToo, text="a", queue="critical")
    dead(text="b", queue="critical")
    c = dead(FailsToo, text="c", queue="default")
    dead(text="d", queue="low")

    response = api.get(f"{BASE}/failed", {"job": FailsToo.name})
    in_default = api.get(f"{BASE}/failed", {"job": FailsToo.name, "queue": "default"})
    nothing = api.get(f"{BASE}/failed", {"job": "no.such.Job"})

    assert result_ids(response) == [c, a]
    assert response.json()["total"] == 4  # before the job filter
    assert result_ids(in_default) == [c]
    assert (result_ids(nothing), nothing.json()["next"]) == ([], None)


def test_failed__pages_by_cursor_newest_first(api: APIClient) -> None:
    ids = [dead(text=str(n), queue=("default", "low")[n % 2]) for n in range(7)]

    found, pages = follow(api, f"{BASE}/failed?per_page=3")

    assert found == ids[::-1]
    assert [len(page["results"]) for page in pages] == [3, 3, 1]
    assert pages[0]["next"].startswith("http://testserver/api/v1/admin/jobs/failed?")
    assert "per_page=3" in pages[0]["next"]
    assert pages[0]["next_cursor"] in pages[0]["next"]
    assert all(page["total"] == 7 for page in pages)


def test_failed__oldest_first(api: APIClient) -> None:
    ids = [dead(text=str(n), queue=("critical", "default")[n % 2]) for n in range(4)]

    found, _ = follow(api, f"{BASE}/failed?order=oldest&per_page=3")

    assert found == ids


def test_failed__job_filter_reads_a_bounded_number_of_tasks_per_request(
    api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the one FailsToo task under 24 newer Fails tasks, and a scan budget of 10 ...
    wanted = dead(FailsToo, text="needle")
    for n in range(24):
        dead(text=str(n))
    monkeypatch.setattr(listing, "SCAN_LIMIT", 10)
    monkeypatch.setattr(listing, "FILTER_CHUNK", 5)

    # ... when a client follows `next` ...
    found, pages = follow(api, f"{BASE}/failed?job={FailsToo.name}&per_page=1&queue=default")

    # ... no request read more than the budget, the early pages are empty, and it is found.
    assert found == [wanted]
    assert all(page["scanned"] <= 10 for page in pages)
    assert [len(page["results"]) for page in pages] == [0, 0, 1]
    assert pages[-1]["next"] is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"per_page": "0"}, "per_page"),
        ({"per_page": "201"}, "per_page"),
        ({"per_page": "ten"}, "per_page"),
        ({"per_page": "1e3"}, "per_page"),
        ({"queue": "nope"}, "queue"),
        ({"queue": ""}, "queue"),
        ({"per_page": ""}, "per_page"),
        ({"job": ""}, "job"),
        ({"cursor": ""}, "cursor"),
        ({"order": "sideways"}, "order"),
        ({"job": "j" * 201}, "job"),
        ({"job": "nul\x00byte"}, "job"),
        ({"cursor": "not base64 !"}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b"[1, 2]").decode()}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b'{"default": -1}').decode()}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b'{"default": 1.5}').decode()}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b'{"default": true}').decode()}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b"\xff\xfe").decode()}, "cursor"),
    ],
)
def test_failed__rejects_malformed_parameters(
    api: APIClient, params: dict[str, str], field: str
) -> None:
    response = api.get(f"{BASE}/failed", params)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert list(response.json()) == [field]


def test_failed__cursor_of_an_unlisted_queue_reads_nothing_more(api: APIClient) -> None:
    dead(queue="default")
    cursor = listing.encode_cursor({"elsewhere": 3})

    response = api.get(f"{BASE}/failed", {"cursor": cursor})

    assert response.status_code == 200
    assert (result_ids(response), response.json()["next"]) == ([], None)


# -- GET /api/v1/admin/jobs/tasks -----------------------------------------------------------


@pytest.mark.parametrize("state", State.ALL)
def test_tasks__lists_the_tasks_of_one_state(api: APIClient, state: str) -> None:
    ids = seed_every_state()

    response = api.get(f"{BASE}/tasks", {"state": state, "queue": "default"})

    assert response.status_code == 200
    assert result_ids(response) == [ids[state]]
    assert response.json()["results"][0]["state"] == state


def test_tasks__pages_pending_tasks_oldest_first(api: APIClient) -> None:
    ids = [Noop.enqueue(Note(str(n)), queue=("default", "low")[n % 2]).id for n in range(5)]

    found, pages = follow(api, f"{BASE}/tasks?state=pending&order=oldest&per_page=2")

    assert found == ids
    assert len(pages) == 3


@pytest.mark.parametrize("params", [{}, {"state": "archived"}, {"state": "DEAD"}])
def test_tasks__requires_a_known_state(api: APIClient, params: dict[str, str]) -> None:
    response = api.get(f"{BASE}/tasks", params)

    assert response.status_code == 400
    assert list(response.json()) == ["state"]


# -- GET /api/v1/admin/jobs/<id> ------------------------------------------------------------


def test_task__shows_a_dead_task_in_full(api: APIClient) -> None:
    task_id = dead(text="full")

    response = api.get(f"{BASE}/{task_id}")

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["state"], body["queue"], body["job"]) == (
        task_id,
        "dead",
        "default",
        Fails.name,
    )
    assert body["payload"] == {"text": "full"}
    assert body["error"] == "RuntimeError: boom full"
    assert "Traceback" in body["traceback"]
    assert body["idempotency_key"] is None
    assert '"full"' in body["raw"]


def test_task__unknown_id_is_404_json(api: APIClient) -> None:
    response = api.get(f"{BASE}/{uuid.uuid4().hex}")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "in any queue" in response.json()["detail"]


MALFORMED_IDS = [
    "xyz",
    "0" * 31,
    "0" * 33,
    "0123456789ABCDEF0123456789ABCDEF",
    "01234567-89ab-cdef-0123-456789abcdef",
    "g" * 32,
    "%C3%A9" * 16,
    "%00" + "0" * 31,
]


@pytest.mark.parametrize("task_id", MALFORMED_IDS)
@pytest.mark.parametrize(("method", "suffix"), [("get", ""), ("delete", ""), ("post", "/retry")])
def test_task__malformed_id_is_400(api: APIClient, method: str, suffix: str, task_id: str) -> None:
    response = getattr(api, method)(f"{BASE}/{task_id}{suffix}")

    assert response.status_code == 400
    assert list(response.json()) == ["task_id"]


# -- POST /api/v1/admin/jobs/<id>/retry -----------------------------------------------------


def test_retry__requeues_a_dead_task_with_fresh_attempts(api: APIClient) -> None:
    task_id = dead()

    response = api.post(f"{BASE}/{task_id}/retry")

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["state"], body["attempts"]) == (task_id, "pending", 0)
    assert body["error"] == "RuntimeError: boom x"  # the last error stays for the record
    (outcome,) = run_burst()
    assert (outcome.task_id, outcome.state) == (task_id, State.DEAD)


def test_retry__runs_a_retrying_task_now(api: APIClient) -> None:
    handle = Flaky.enqueue(Note("soon"))
    run_burst()  # fails once; the next attempt is about a second away
    assert handle.refresh() == State.RETRY
    Flaky.failing = False
    try:
        response = api.post(f"{BASE}/{handle.id}/retry")
        outcomes = run_burst()
    finally:
        Flaky.failing = True

    assert response.status_code == 200
    assert response.json()["state"] == "pending"
    assert [(o.task_id, o.state) for o in outcomes] == [(handle.id, State.COMPLETED)]


@pytest.mark.parametrize("state", [State.SCHEDULED, State.PENDING, State.ACTIVE, State.COMPLETED])
def test_retry__other_states_conflict_with_the_reason(api: APIClient, state: str) -> None:
    ids = seed_every_state()

    response = api.post(f"{BASE}/{ids[state]}/retry")

    assert response.status_code == 409
    body = response.json()
    assert body["state"] == state
    assert f"is {state}: only dead and retrying tasks can be retried" in body["detail"]
    info = get_inspector().find(ids[state])
    assert info is not None
    assert info.state == state


def test_retry__unknown_id_is_404(api: APIClient) -> None:
    response = api.post(f"{BASE}/{uuid.uuid4().hex}/retry")

    assert response.status_code == 404
    assert "detail" in response.json()


def test_retry__get_is_not_allowed(api: APIClient) -> None:
    response = api.get(f"{BASE}/{uuid.uuid4().hex}/retry")

    assert response.status_code == 405
    assert response["Allow"] == "POST, OPTIONS"


# -- DELETE /api/v1/admin/jobs/<id> ---------------------------------------------------------


@pytest.mark.parametrize(
    "state", [State.SCHEDULED, State.PENDING, State.RETRY, State.DEAD, State.COMPLETED]
)
def test_delete__discards_a_task_that_is_not_running(api: APIClient, state: str) -> None:
    ids = seed_every_state()

    response = api.delete(f"{BASE}/{ids[state]}")
    again = api.delete(f"{BASE}/{ids[state]}")

    assert response.status_code == 204
    assert response.content == b""
    assert get_inspector().find(ids[state]) is None
    assert again.status_code == 404


def test_delete__releases_the_idempotency_key(api: APIClient) -> None:
    handle: JobHandle = Noop.enqueue(Note("once"), idempotency_key="k")

    response = api.delete(f"{BASE}/{handle.id}")

    assert response.status_code == 204
    assert Noop.enqueue(Note("once"), idempotency_key="k").id != handle.id


def test_delete__running_task_conflicts(api: APIClient) -> None:
    ids = seed_every_state()

    response = api.delete(f"{BASE}/{ids[State.ACTIVE]}")

    assert response.status_code == 409
    assert response.json()["state"] == "active"
    assert "running" in response.json()["detail"]
    assert get_inspector().find(ids[State.ACTIVE]) is not None


def test_delete__unknown_id_is_404(api: APIClient) -> None:
    response = api.delete(f"{BASE}/{uuid.uuid4().hex}")

    assert response.status_code == 404


# -- queues: pause, resume, dead ------------------------------------------------------------


def test_pause__pauses_and_resume__resumes(api: APIClient) -> None:
    handle = Noop.enqueue(Note("held"), queue="low")

    paused = api.post(f"{BASE}/queues/low/pause")
    held = run_burst()
    resumed = api.post(f"{BASE}/queues/low/resume")
    ran = run_burst()

    assert paused.status_code == resumed.status_code == 200
    assert (paused.json()["name"], paused.json()["paused"], paused.json()["pending"]) == (
        "low",
        True,
        1,
    )
    assert held == []
    assert resumed.json()["paused"] is False
    assert [o.task_id for o in ran] == [handle.id]


@pytest.mark.parametrize(
    ("method", "action"),
    [("post", "pause"), ("post", "resume"), ("post", "dead/retry"), ("delete", "dead")],
)
def test_queues__unknown_queue_is_404(api: APIClient, method: str, action: str) -> None:
    response = getattr(api, method)(f"{BASE}/queues/nope/{action}")

    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


def test_queue_dead__retry_all_moves_every_dead_task_to_pending(api: APIClient) -> None:
    ids = {dead(text=str(n)) for n in range(3)}
    dead(queue="low")

    response = api.post(f"{BASE}/queues/default/dead/retry")

    assert response.status_code == 200
    assert response.json() == {"queue": "default", "count": 3}
    pending = get_inspector().tasks("default", State.PENDING)
    assert {item.id for item in pending.items} == ids
    assert get_inspector().tasks("low", State.DEAD).total == 1


def test_queue_dead__delete_all_empties_the_dead_set(api: APIClient) -> None:
    for n in range(3):
        dead(text=str(n))

    response = api.delete(f"{BASE}/queues/default/dead")

    assert response.status_code == 200
    assert response.json() == {"queue": "default", "count": 3}
    assert get_inspector().tasks("default", State.DEAD).total == 0


# -- who may call ---------------------------------------------------------------------------

SOME_ID = "0123456789abcdef0123456789abcdef"
#: Every endpoint, with valid arguments.
ENDPOINTS = [
    ("get", ""),
    ("get", "/failed"),
    ("get", "/tasks?state=pending"),
    ("get", f"/{SOME_ID}"),
    ("delete", f"/{SOME_ID}"),
    ("post", f"/{SOME_ID}/retry"),
    ("post", "/queues/default/pause"),
    ("post", "/queues/default/resume"),
    ("post", "/queues/default/dead/retry"),
    ("delete", "/queues/default/dead"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_access__anonymous_gets_no_data(
    db: None, redis_ns: RedisNamespace, method: str, path: str
) -> None:
    dead()

    response = getattr(APIClient(), method)(BASE + path)

    assert response.status_code in (401, 403)
    assert list(response.json()) == ["detail"]
    assert get_inspector().queues()[1].paused is False


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize("auth", ["session", "token"])
def test_access__non_admin_is_forbidden(
    db: None, redis_ns: RedisNamespace, method: str, path: str, auth: str
) -> None:
    client = signed_in(make_user("bob", staff=False), auth)

    response = getattr(client, method)(BASE + path)

    assert response.status_code == 403
    assert list(response.json()) == ["detail"]


def signed_in(user: AbstractUser, auth: str) -> APIClient:
    client = APIClient()
    if auth == "session":
        assert client.login(username=user.username, password="a-long-pass-phrase")
    else:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.mark.parametrize("auth", ["session", "token"])
def test_access__admin_reads_and_acts_with_session_or_token(
    admin_user: AbstractUser, redis_ns: RedisNamespace, auth: str
) -> None:
    client = signed_in(admin_user, auth)
    task_id = dead()

    overview = client.get(BASE)
    failed = client.get(f"{BASE}/failed")
    retried = client.post(f"{BASE}/{task_id}/retry")
    deleted = client.delete(f"{BASE}/{task_id}")

    assert overview.status_code == failed.status_code == retried.status_code == 200
    assert result_ids(failed) == [task_id]
    assert deleted.status_code == 204


def test_access__wrong_token_is_refused(admin_user: AbstractUser, redis_ns: RedisNamespace) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    response = client.get(BASE)

    assert response.status_code in (401, 403)
    assert list(response.json()) == ["detail"]


def test_access__session_changes_need_the_csrf_token(
    admin_user: AbstractUser, redis_ns: RedisNamespace
) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post(f"{BASE}/queues/default/pause")

    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert get_inspector().queues()[1].paused is False


def test_access__setting_cannot_lift_the_model_permissions(
    db: None, redis_ns: RedisNamespace, settings: Any
) -> None:
    # Before: this setting let any signed-in user in. The setting now only adds requirements.
    settings.JOBS_API_PERMISSION_CLASSES = ["rest_framework.permissions.IsAuthenticated"]
    client = signed_in(make_user("bob", staff=False, perms=EVERY_PERMISSION), "token")
    clerk = signed_in(make_user("clerk", staff=True), "token")

    assert client.get(BASE).status_code == 403
    assert clerk.get(BASE).status_code == 403


def test_access__anonymous_is_refused_even_if_the_setting_allows_any(
    db: None, redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS_API_PERMISSION_CLASSES = ["rest_framework.permissions.AllowAny"]

    response = APIClient().get(BASE)

    assert response.status_code in (401, 403)


def test_access__setting_accepts_combined_classes(
    db: None, redis_ns: RedisNamespace, settings: Any
) -> None:
    from rest_framework.permissions import IsAdminUser, IsAuthenticated

    settings.JOBS_API_PERMISSION_CLASSES = [IsAdminUser & IsAuthenticated]
    staff = signed_in(make_user("ada", staff=True, perms=("view_task",)), "session")
    other = signed_in(make_user("bob", staff=False, perms=("view_task",)), "session")

    assert staff.get(BASE).status_code == 200
    assert other.get(BASE).status_code == 403


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rest_framework.permissions.IsAdminUser", "must be a list"),
        (["rest_framework.permissions.NoSuchThing"], "cannot be imported"),
        (["django_jobs.api.listing.bounds"], "not a DRF permission class"),
    ],
)
def test_permission_classes__bad_setting_says_what_is_wrong(
    settings: Any, value: object, message: str
) -> None:
    settings.JOBS_API_PERMISSION_CLASSES = value

    with pytest.raises(ImproperlyConfigured, match=message):
        permissions.permission_classes()


# -- Redis disabled or unreachable ----------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_unavailable__disabled_jobs_are_503(
    api: APIClient, settings: Any, method: str, path: str
) -> None:
    settings.JOBS = {"REDIS_URL": None}

    response = getattr(api, method)(BASE + path)

    assert response.status_code == 503
    assert response.json() == {
        "detail": "Jobs are disabled: JOBS['REDIS_URL'] is not set.",
        "code": "jobs_disabled",
    }


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_unavailable__unreachable_redis_is_503(
    api: APIClient, settings: Any, method: str, path: str
) -> None:
    settings.JOBS = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "ENQUEUE_TIMEOUT": 1}

    response = getattr(api, method)(BASE + path)

    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "broker_unavailable"
    assert "did not answer" in body["detail"]


def test_unavailable__validation_comes_first(api: APIClient, settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None}

    response = api.get(f"{BASE}/not-an-id")

    assert response.status_code == 400
