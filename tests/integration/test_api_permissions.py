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
from django.http import HttpResponse
from django.urls import URLPattern, URLResolver, reverse
from rest_framework.views import APIView

from django_jobs.api import urls
from django_jobs.inspector import Inspector, get_inspector
from django_jobs.keys import State
from tests.conftest import RedisNamespace

# The `X as X` imports re-export what test_api_permission_classes takes from this module.
from tests.integration.api_cells import KIND as KIND
from tests.integration.api_cells import (
    KINDS,
    SCHEDULES,
    Seeded,
    dead_deleted,
    dead_retried,
    queue_paused,
    queue_resumed,
    schedule_of,
    schedule_paused,
    schedule_ran,
    schedule_resumed,
    task_canceled,
    task_deleted,
    task_retried,
)
from tests.integration.api_cells import Kind as Kind
from tests.integration.api_cells import contents as contents
from tests.integration.api_cells import seed as seed
from tests.integration.test_api import BASE


@pytest.fixture(autouse=True)
def schedules(settings: Any, redis_ns: RedisNamespace) -> None:
    settings.JOBS = {**settings.JOBS, "SCHEDULE": SCHEDULES}


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
