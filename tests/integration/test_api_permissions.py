"""Who may do what through the jobs admin API: exactly what the admin lets them do.

The matrix crosses every kind of user with every endpoint and method of the API (derived from
api/urls.py, and checked against it). The expected outcome of each cell is not written here: the
test asks the admin first, by calling the admin page or action that does the same thing, and then
requires the API to agree. An allowed call must answer its success code and have its effect in
Redis; a denied one must answer 401/403 with only `detail`, and leave every key of the namespace
as it was.

The admin acts on queue "low" and the API on queue "default", so that both can act in one cell;
likewise on the schedules "low-sync" and "default-sync" (SCHEDULES).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.http import HttpResponse
from django.urls import URLPattern, URLResolver, reverse
from rest_framework.test import APIClient
from rest_framework.views import APIView

from django_jobs.api import urls
from django_jobs.inspector import Inspector, get_inspector
from django_jobs.keys import State
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace
from tests.integration.test_api import BASE, EVERY_PERMISSION, Fails, Noop, Note
from tests.redis_state import snapshot

# -- users ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A kind of user: how the test makes one."""

    name: str
    anonymous: bool = False
    staff: bool = True
    active: bool = True
    superuser: bool = False
    perms: tuple[str, ...] = ()
    #: Grant perms through a group rather than to the user.
    group: bool = False

    def client(self, groups: tuple[str, ...] = ()) -> APIClient:
        """A client signed in as a new user of this kind (one client for admin and API).

        `groups`: names of more groups (no permissions given) to put the user in.
        """
        client = APIClient()
        if self.anonymous:
            return client
        user = User.objects.create_user(
            self.name.replace(" ", "-"),
            is_staff=self.staff,
            is_active=self.active,
            is_superuser=self.superuser,
        )
        perms = Permission.objects.filter(
            content_type__app_label="django_jobs", codename__in=self.perms
        )
        assert perms.count() == len(self.perms)
        if self.group:
            group = Group.objects.create(name=f"{user.username}-group")
            group.permissions.set(perms)
            user.groups.add(group)
        else:
            user.user_permissions.set(perms)
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        client.force_login(user)
        return client


KINDS = [
    Kind("anonymous", anonymous=True),
    Kind("active non-staff with every permission", staff=False, perms=EVERY_PERMISSION, group=True),
    Kind("inactive staff with every permission", active=False, perms=EVERY_PERMISSION),
    Kind("staff with none"),
    Kind("staff with view_task", perms=("view_task",)),
    Kind("staff with change_task", perms=("change_task",), group=True),
    Kind("staff with delete_task only", perms=("delete_task",)),
    Kind("superuser", superuser=True),
]
KIND = {kind.name: kind for kind in KINDS}


# -- what each cell starts from -------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """A dead task for the API (queue "default") and one for the admin (queue "low")."""

    api_task: str
    admin_task: str

    def task(self, queue: str) -> str:
        return self.api_task if queue == "default" else self.admin_task


def schedule_of(queue: str) -> str:
    """The schedule each side acts on: one per queue, enqueueing on it."""
    return f"{queue}-sync"


SCHEDULES = {
    schedule_of(queue): {"job": Noop.name, "every": 60, "payload": {"text": queue}, "queue": queue}
    for queue in ("default", "low")
}


@pytest.fixture(autouse=True)
def schedules(settings: Any, redis_ns: RedisNamespace) -> None:
    settings.JOBS = {**settings.JOBS, "SCHEDULE": SCHEDULES}


def seed(paused: bool, waiting: bool = False) -> Seeded:
    """A dead task on each side; with `waiting`, a scheduled one instead (to cancel)."""
    if waiting:
        seeded = Seeded(
            api_task=Noop.enqueue(Note("api"), queue="default", delay=3600).id,
            admin_task=Noop.enqueue(Note("admin"), queue="low", delay=3600).id,
        )
    else:
        seeded = Seeded(
            api_task=Fails.enqueue(Note("api"), queue="default").id,
            admin_task=Fails.enqueue(Note("admin"), queue="low").id,
        )
        run_burst(["default", "low"])
    inspector = get_inspector()
    for queue in ("default", "low"):
        info = inspector.task(queue, seeded.task(queue))
        assert info is not None
        assert info.state == (State.SCHEDULED if waiting else State.DEAD)
        if paused:
            inspector.pause(queue)
            inspector.pause_schedule(schedule_of(queue))
    return seeded


def contents(redis_ns: RedisNamespace) -> dict[str, tuple[Any, ...]]:
    """Every key of the namespace with its type and content, and whether it expires.

    Not the TTL itself: a day counter's TTL in whole seconds ticks down during a cell, and a
    slow cell (the first on a worker) would see it change with nothing written. Times are read
    against a fixed clock (epoch 0), not Redis' now: a scheduled task an hour away would come
    nearer by the length of a slow cell (more than SLACK on a loaded machine) with nothing
    written.
    """
    return {key: (*value[:2], len(value) > 2) for key, value in snapshot(redis_ns, now=0.0).items()}


def state_of(insp: Inspector, queue: str, task_id: str) -> str | None:
    info = insp.task(queue, task_id)
    return info.state if info is not None else None


def queue_info(insp: Inspector, queue: str) -> Any:
    return next(info for info in insp.queues() if info.name == queue)


# The effect of each change, on one queue: True once it happened.


def task_deleted(insp: Inspector, queue: str, task_id: str) -> bool:
    return state_of(insp, queue, task_id) is None


def task_retried(insp: Inspector, queue: str, task_id: str) -> bool:
    return state_of(insp, queue, task_id) == State.PENDING


def task_canceled(insp: Inspector, queue: str, task_id: str) -> bool:
    return state_of(insp, queue, task_id) == State.CANCELED


def queue_paused(insp: Inspector, queue: str, task_id: str) -> bool:
    return bool(queue_info(insp, queue).paused)


def queue_resumed(insp: Inspector, queue: str, task_id: str) -> bool:
    return not queue_info(insp, queue).paused


def dead_deleted(insp: Inspector, queue: str, task_id: str) -> bool:
    info = queue_info(insp, queue)
    return bool(info.dead == 0 and state_of(insp, queue, task_id) is None)


def dead_retried(insp: Inspector, queue: str, task_id: str) -> bool:
    info = queue_info(insp, queue)
    return bool(info.dead == 0 and state_of(insp, queue, task_id) == State.PENDING)


def schedule_ran(insp: Inspector, queue: str, task_id: str) -> bool:
    info = insp.schedule(schedule_of(queue))
    return info.last_task_id is not None and state_of(insp, queue, info.last_task_id) == "pending"


def schedule_paused(insp: Inspector, queue: str, task_id: str) -> bool:
    return insp.schedule(schedule_of(queue)).paused


def schedule_resumed(insp: Inspector, queue: str, task_id: str) -> bool:
    return not insp.schedule(schedule_of(queue)).paused


# -- the admin's equivalents ----------------------------------------------------------------

#: An admin request: (method, url, POST data), given the queue and the task to act on.
AdminCall = Callable[[str, str], tuple[str, str, dict[str, str]]]


def admin_page(name: str, query: str = "") -> AdminCall:
    def call(queue: str, task_id: str) -> tuple[str, str, dict[str, str]]:
        return "get", reverse(f"admin:django_jobs_{name}") + query, {}

    return call


def admin_task(action: str, method: str = "post") -> AdminCall:
    def call(queue: str, task_id: str) -> tuple[str, str, dict[str, str]]:
        url = reverse(f"admin:django_jobs_task_{action}", args=[queue, task_id])
        return method, url, {"state": State.DEAD} if method == "post" else {}

    return call


def admin_queue(action: str) -> AdminCall:
    def call(queue: str, task_id: str) -> tuple[str, str, dict[str, str]]:
        return "post", reverse(f"admin:django_jobs_queue_{action}", args=[queue]), {}

    return call


def admin_schedule(action: str, method: str = "post") -> AdminCall:
    def call(queue: str, task_id: str) -> tuple[str, str, dict[str, str]]:
        url = reverse(f"admin:django_jobs_schedule_{action}", args=[schedule_of(queue)])
        return method, url, {}

    return call


QUEUES_PAGE = admin_page("queue_changelist")
WORKERS_PAGE = admin_page("worker_changelist")


def admin_allows(response: HttpResponse) -> bool:
    """The admin's answer: a page or a redirect after the change, or 403 / the login page."""
    if response.status_code == 302:
        return not response["Location"].startswith(reverse("admin:login"))
    assert response.status_code in (200, 403), response.status_code
    return response.status_code == 200


# -- the API's endpoints --------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One method of one API route, and the admin pages or actions that do the same."""

    method: str
    #: The route as api/urls.py writes it, below the mount point.
    route: str
    success: int
    admin: tuple[AdminCall, ...]
    #: The effect in Redis of a change (None for reads), on a queue and its seeded task.
    effect: Callable[[Inspector, str, str], bool] | None = None
    query: str = ""
    #: Queues start paused (to resume them).
    paused: bool = False
    #: The seeded tasks are scheduled, not dead (to cancel them).
    waiting: bool = False
    #: Whether the API's answer shows the seeded task.
    shows_task: bool = False

    @property
    def id(self) -> str:
        return f"{self.method.upper()} {self.route or '/'}{self.query}"

    def url(self, seeded: Seeded) -> str:
        path = self.route.replace("<str:task_id>", seeded.api_task)
        path = path.replace("<path:name>", schedule_of("default"))
        return BASE + path.replace("<str:queue>", "default") + self.query


OVERVIEW = ""
FAILED = "/failed"
TASKS = "/tasks"
TASK = "/<str:task_id>"
RETRY = "/<str:task_id>/retry"
CANCEL = "/<str:task_id>/cancel"
PAUSE = "/queues/<str:queue>/pause"
RESUME = "/queues/<str:queue>/resume"
DEAD = "/queues/<str:queue>/dead"
DEAD_RETRY = "/queues/<str:queue>/dead/retry"
SCHEDULE_LIST = "/schedules"
SCHEDULE = "/schedules/<path:name>"
SCHEDULE_RUN = "/schedules/<path:name>/run"
SCHEDULE_PAUSE = "/schedules/<path:name>/pause"
SCHEDULE_RESUME = "/schedules/<path:name>/resume"

#: The reads, each with the admin pages showing the same things.
READS = {
    OVERVIEW: ((QUEUES_PAGE, WORKERS_PAGE), ""),
    FAILED: ((admin_page("task_changelist", "?queue=default&state=dead"),), ""),
    TASKS: ((admin_page("task_changelist", "?queue=default&state=pending"),), "?state=pending"),
    TASK: ((admin_task("change", "get"),), ""),
    SCHEDULE_LIST: ((admin_page("schedule_changelist"),), ""),
    SCHEDULE: ((admin_schedule("change", "get"),), ""),
}
#: Reads whose answer holds the seeded dead task.
SHOWN = {("get", FAILED), ("get", TASK)}
ROUTES = [
    OVERVIEW,
    FAILED,
    TASKS,
    TASK,
    RETRY,
    CANCEL,
    PAUSE,
    RESUME,
    DEAD,
    DEAD_RETRY,
    SCHEDULE_LIST,
    SCHEDULE,
    SCHEDULE_RUN,
    SCHEDULE_PAUSE,
    SCHEDULE_RESUME,
]

ENDPOINTS = [
    *(
        Endpoint(method, route, 200, admin, query=query, shows_task=(method, route) in SHOWN)
        for route, (admin, query) in READS.items()
        for method in ("get", "head")
    ),
    # OPTIONS describes an endpoint (no jobs data): who may see the Jobs section may ask.
    *(Endpoint("options", route, 200, (QUEUES_PAGE,)) for route in ROUTES),
    Endpoint("delete", TASK, 204, (admin_task("delete"),), task_deleted),
    Endpoint("post", RETRY, 200, (admin_task("retry"),), task_retried),
    Endpoint("post", CANCEL, 200, (admin_task("cancel"),), task_canceled, waiting=True),
    Endpoint("post", PAUSE, 200, (admin_queue("pause"),), queue_paused),
    Endpoint("post", RESUME, 200, (admin_queue("resume"),), queue_resumed, paused=True),
    Endpoint("post", DEAD_RETRY, 200, (admin_queue("retry_all_dead"),), dead_retried),
    Endpoint("delete", DEAD, 200, (admin_queue("delete_all_dead"),), dead_deleted),
    Endpoint("post", SCHEDULE_RUN, 200, (admin_schedule("run"),), schedule_ran),
    Endpoint("post", SCHEDULE_PAUSE, 200, (admin_schedule("pause"),), schedule_paused),
    Endpoint(
        "post",
        SCHEDULE_RESUME,
        200,
        (admin_schedule("resume"),),
        schedule_resumed,
        paused=True,
    ),
]


def api_routes(patterns: list[Any] = urls.urlpatterns) -> Iterator[tuple[str, type[APIView]]]:
    """(route, view class) of every URL pattern of the API (or of `patterns`), routes as in
    ENDPOINTS."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, type[APIView]]]:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            else:
                assert isinstance(pattern, URLPattern)
                yield route, pattern.callback.view_class  # type: ignore[attr-defined]

    yield from walk(patterns, "")


def handled_methods(view: type[APIView]) -> set[str]:
    methods = {m for m in view.http_method_names if m != "head" and hasattr(view, m)}
    # Django answers HEAD with the view's get.
    return methods | {"head"} if "get" in methods else methods


def test_permission_matrix__covers_every_endpoint_and_method() -> None:
    expected = {(method, route) for route, view in api_routes() for method in handled_methods(view)}

    assert {(e.method, e.route) for e in ENDPOINTS} == expected
    assert len(ENDPOINTS) == len(expected)


# -- the matrix -----------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.id)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_permission_matrix__api_allows_what_the_admin_allows(
    redis_ns: RedisNamespace, db: None, kind: Kind, endpoint: Endpoint
) -> None:
    seeded = seed(endpoint.paused, endpoint.waiting)
    insp = get_inspector()
    client = kind.client()

    # Ask the admin, on queue "low": every equivalent page or action must answer alike.
    verdicts = []
    for admin_call in endpoint.admin:
        method, url, data = admin_call("low", seeded.admin_task)
        before = contents(redis_ns)
        allowed = admin_allows(getattr(client, method)(url, data))
        verdicts.append(allowed)
        if endpoint.effect is not None:  # the answer was read right: it did what it said
            assert endpoint.effect(insp, "low", seeded.admin_task) is allowed
        else:
            assert contents(redis_ns) == before
    assert len(set(verdicts)) == 1, verdicts
    (admin_allowed,) = set(verdicts)

    # The API, on queue "default".
    before = contents(redis_ns)
    response = getattr(client, endpoint.method)(endpoint.url(seeded))

    if admin_allowed:
        assert response.status_code == endpoint.success, response.content
        if endpoint.effect is not None:
            assert endpoint.effect(insp, "default", seeded.api_task)
        else:
            assert contents(redis_ns) == before
        if endpoint.shows_task:
            assert seeded.api_task in response.content.decode()
    else:
        signed_in = kind.active and not kind.anonymous
        assert response.status_code in ((403,) if signed_in else (401, 403)), response.content
        if endpoint.method != "head":  # HEAD: no body
            assert list(response.json()) == ["detail"]
        assert contents(redis_ns) == before
        if endpoint.effect is not None:
            assert not endpoint.effect(insp, "default", seeded.api_task)
