"""The admin's Jobs section against hostile users and hostile data.

- Text written by anyone who can enqueue or write to Redis (payloads, errors, tracebacks, job
  names, idempotency keys, worker hosts, schedule names and payloads, search terms) is shown
  escaped on every page: the queues, the tasks list and its search results, a task's page, the
  confirmation pages, the workers and the schedules.
- Every action needs its permission (view_task to look, change_task to retry, pause, resume or
  run a schedule, delete_task to delete) for every kind of staff user: allowed, it does what it
  says (read back from Redis), refused it changes nothing; every form carries the CSRF token.
- The admin's list answers whatever its query string holds: no 500, nothing reflected raw.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib import admin
from django.urls import resolve, reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from django_jobs.admin.listing import MAX_INPUT
from django_jobs.admin.pages import JobsAdmin
from django_jobs.client import get_broker
from django_jobs.flows import get_run
from django_jobs.flows.details import get_run_detail
from django_jobs.inspector import Inspector, get_inspector
from django_jobs.keys import State, worker, workers
from django_jobs.message import Message, encode
from testproject.shop.flows import Wait, WaitFlow
from tests.conftest import RedisNamespace, RedisServer
from tests.integration.api_cells import contents
from tests.integration.staff_kinds import STAFF_KINDS, allowed
from tests.integration.test_admin import (
    Fails,
    Note,
    dead_task,
    login,
    make_user,
    queue_url,
    state_of,
    task_url,
)
from tests.integration.test_admin_flows import RUNS, drain, run_url
from tests.integration.test_admin_schedules import SyncAccounts, schedule_url

pytestmark = pytest.mark.django_db

SCRIPT = '<script>alert("x")</script>'
#: Hostile text without a "/".
IMG = "<img src=x onerror=alert(1)>"
#: What must never reach a page unescaped.
RAW = ("<script>alert", "<img src=x")
QUEUES = reverse("admin:django_jobs_queue_changelist")
TASKS = reverse("admin:django_jobs_task_changelist")
WORKERS = reverse("admin:django_jobs_worker_changelist")
SCHEDULES = reverse("admin:django_jobs_schedule_changelist")


@pytest.fixture
def insp(redis_ns: RedisNamespace, settings: Any) -> Inspector:
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULE": {
            IMG: {"job": SyncAccounts.name, "every": 30, "queue": "low"},
            SCRIPT: {"job": SyncAccounts.name, "every": 60},  # its name holds a "/"
            "sync": {"job": SyncAccounts.name, "every": 30, "payload": {"id": 7}},
        },
    }
    return get_inspector()


def hostile_records(redis_ns: RedisNamespace) -> tuple[str, str]:
    """A dead task of ours whose payload and error hold SCRIPT, and one written by hand whose
    job name, payload, key, error and traceback do; a worker whose host and task do."""
    ours = dead_task(SCRIPT)
    theirs = "e" * 32
    k = get_broker().keys("default")
    message = Message(theirs, SCRIPT, "default", {SCRIPT: IMG}, 1, 30, 60, f"key-{SCRIPT}")
    redis_ns.client.hset(
        k.task(theirs),
        mapping={"state": "dead", "msg": encode(message), "error": IMG, "traceback": SCRIPT,
                 "died_at": time.time(), "attempts": 1},
    )  # fmt: skip
    redis_ns.client.zadd(k.dead, {theirs: time.time()})
    ns, worker_id = redis_ns.namespace, f"host:{SCRIPT}"
    redis_ns.client.zadd(workers(ns), {worker_id: time.time()})
    redis_ns.client.hset(
        worker(ns, worker_id),
        mapping={"host": SCRIPT, "pid": 1, "queues": "default", "concurrency": 1,
                 "started": time.time(), "last_beat": time.time(),
                 "tasks": json.dumps([{"id": theirs, "queue": "default"}])},
    )  # fmt: skip
    redis_ns.client.expire(worker(ns, worker_id), 60)
    return ours, theirs


def assert_escaped(body: str, where: object, *, shown: bool = True) -> None:
    for raw in RAW:
        assert raw not in body, where
    if shown:  # the text is there, escaped
        assert "&lt;script&gt;" in body or "&lt;img" in body, where


def test_escaping__every_page_shows_hostile_text_escaped(
    redis_ns: RedisNamespace, insp: Inspector
) -> None:
    ours, theirs = hostile_records(redis_ns)
    client = login(make_user("root", superuser=True))

    gets: list[tuple[str, dict[str, Any]]] = [
        (QUEUES, {}),
        (TASKS, {"state": "dead"}),
        (TASKS, {"state": "dead", "queue": "default"}),
        (TASKS, {"state": "dead", "q": SCRIPT}),
        (TASKS, {"state": "dead", "q": "key-<script>"}),
        (TASKS, {"state": "dead", "job": SCRIPT}),
        (TASKS, {"state": "dead", "q": theirs}),
        (task_url(ours), {}),
        (task_url(theirs), {}),
        (task_url(theirs, action="delete"), {}),
        (WORKERS, {}),
        (SCHEDULES, {}),
        (schedule_url(IMG), {}),
        (schedule_url(SCRIPT), {}),
    ]
    for url, query in gets:
        response = client.get(url, query)
        assert response.status_code == 200, (url, query)
        # Queue names are checked at start-up (E005): nothing of theirs on the Queues page.
        assert_escaped(response.content.decode(), (url, query), shown=url != QUEUES)
    asked = client.post(
        f"{TASKS}?queue=default&state=dead",
        {"action": "delete_selected", "_selected_action": [theirs, SCRIPT]},
    )
    assert asked.status_code == 200
    assert_escaped(asked.content.decode(), "delete confirmation")


# -- every action, every kind of staff user -------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What an action acts on: a task (dead, or waiting for the cancels) and a flow run."""

    task: str
    call: str


#: (name, method, url, form, the permission it needs: "view", "change" or "delete").
Action = tuple[str, str, Callable[[Target], str], dict[str, Any], str]
ACTIONS: list[Action] = [
    ("task page", "get", lambda t: task_url(t.task), {}, "view"),
    ("task retry", "post", lambda t: task_url(t.task, action="retry"), {}, "change"),
    ("task delete, asked", "get", lambda t: task_url(t.task, action="delete"), {}, "delete"),
    ("task delete", "post", lambda t: task_url(t.task, action="delete"), {"state": "dead"},
     "delete"),
    ("retry ticked", "post", lambda t: f"{TASKS}?queue=default&state=dead",
     {"action": "retry_selected", "_selected_action": "{t}"}, "change"),
    ("delete ticked, asked", "post", lambda t: f"{TASKS}?queue=default&state=dead",
     {"action": "delete_selected", "_selected_action": "{t}"}, "delete"),
    ("delete ticked", "post", lambda t: f"{TASKS}?queue=default&state=dead",
     {"action": "delete_selected", "_selected_action": "{t}", "post": "yes"}, "delete"),
    ("pause", "post", lambda t: queue_url("pause"), {}, "change"),
    ("resume", "post", lambda t: queue_url("resume"), {}, "change"),
    ("retry all dead, asked", "get", lambda t: queue_url("retry_all_dead"), {}, "change"),
    ("retry all dead", "post", lambda t: queue_url("retry_all_dead"), {"post": "yes"}, "change"),
    ("delete all dead, asked", "get", lambda t: queue_url("delete_all_dead"), {}, "delete"),
    ("delete all dead", "post", lambda t: queue_url("delete_all_dead"), {"post": "yes"},
     "delete"),
    ("schedule run", "post", lambda t: schedule_url("sync", "run"), {}, "change"),
    ("schedule pause", "post", lambda t: schedule_url("sync", "pause"), {}, "change"),
    ("schedule resume", "post", lambda t: schedule_url("sync", "resume"), {}, "change"),
    # The pages, each a look (view_task, or change_task which implies it).
    ("queues", "get", lambda t: QUEUES, {}, "view"),
    ("tasks list", "get", lambda t: f"{TASKS}?queue=default&state=dead", {}, "view"),
    ("workers", "get", lambda t: WORKERS, {}, "view"),
    ("schedules", "get", lambda t: SCHEDULES, {}, "view"),
    ("schedule page", "get", lambda t: schedule_url("sync"), {}, "view"),
    # The cancels act on a waiting task (a refused one must leave it waiting).
    ("task cancel", "post", lambda t: task_url(t.task, action="cancel"), {}, "change"),
    ("cancel ticked", "post", lambda t: f"{TASKS}?queue=default&state=scheduled",
     {"action": "cancel_selected", "_selected_action": "{t}"}, "change"),
    # A flow run waiting for a signal.
    ("flow runs", "get", lambda t: RUNS, {}, "view"),
    ("flow run page", "get", lambda t: run_url(t.call), {}, "view"),
    ("flow cancel", "post", lambda t: run_url(t.call, "cancel"), {}, "change"),
    ("flow signal", "post", lambda t: run_url(t.call, "signal"), {"name": "go"}, "change"),
]  # fmt: skip


def target_for(name: str, insp: Inspector) -> Target:
    """A dead task; a waiting one for the task cancels; and a flow run for the flow actions. The
    queue and the schedule start paused for the resumes."""
    waiting = name in ("task cancel", "cancel ticked")
    task = Fails.enqueue(Note("later"), delay=60).id if waiting else dead_task()
    if name == "resume":
        insp.pause("default")
    if name == "schedule resume":
        insp.pause_schedule("sync")
    if not name.startswith("flow"):
        return Target(task, "c" * 32)
    call = WaitFlow.start(Wait())
    drain()
    return Target(task, call)


def task_is(state: str | None, *, no_dead: bool = False) -> Callable[[Inspector, Target], bool]:
    """The target task is in `state` (None: gone); with `no_dead`, the dead list is empty too."""
    return lambda i, t: state_of(i, t.task) == state and not (no_dead and queue(i).dead)


def queue(insp: Inspector) -> Any:
    return next(q for q in insp.queues() if q.name == "default")


#: What each change does, read back from Redis: True once done. Every other action (a page, a
#: confirmation page) writes nothing.
EFFECTS: dict[str, Callable[[Inspector, Target], bool]] = {
    **dict.fromkeys(["task retry", "retry ticked"], task_is(State.PENDING)),
    "retry all dead": task_is(State.PENDING, no_dead=True),
    **dict.fromkeys(["task delete", "delete ticked"], task_is(None)),
    "delete all dead": task_is(None, no_dead=True),
    **dict.fromkeys(["task cancel", "cancel ticked"], task_is(State.CANCELED)),
    "pause": lambda i, t: queue(i).paused,
    "resume": lambda i, t: not queue(i).paused,
    "schedule run": lambda i, t: state_of(i, i.schedule("sync").last_task_id or "-") is not None,
    "schedule pause": lambda i, t: i.schedule("sync").paused,
    "schedule resume": lambda i, t: not i.schedule("sync").paused,
    "flow cancel": lambda i, t: get_run(t.call).status == "canceled",  # type: ignore[union-attr]
    "flow signal": lambda i, t: [s.name for s in get_run_detail(t.call).signals] == ["go"],  # type: ignore[union-attr]
}


@pytest.mark.parametrize("kind", STAFF_KINDS)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a[0])
def test_permissions__every_action_needs_its_permission(
    redis_ns: RedisNamespace, insp: Inspector, kind: str, action: Action
) -> None:
    name, method, url, form, needs = action
    target = target_for(name, insp)
    client = login(make_user(f"u-{kind}", *STAFF_KINDS[kind]))
    data = {k: target.task if v == "{t}" else v for k, v in form.items()}
    effect = EFFECTS.get(name)
    assert effect is None or not effect(insp, target)
    before = contents(redis_ns)  # whether keys expire, not their TTLs (see contents)

    response = getattr(client, method)(url(target), data)

    if allowed(needs, kind):
        assert response.status_code in (200, 302), (name, kind)
        if effect is not None:  # it did what it answered it did
            assert effect(insp, target), (name, kind)
        else:
            assert contents(redis_ns) == before, (name, kind)
    else:
        assert response.status_code == 403, (name, kind)
        assert contents(redis_ns) == before, (name, kind)


def admin_routes() -> set[str]:
    """The URL name of every page and action of the Jobs section (each JobsAdmin's routes)."""
    return {
        f"django_jobs_{model.__name__.lower()}_{name}"
        for model, model_admin in admin.site._registry.items()
        if isinstance(model_admin, JobsAdmin)
        for _route, _view, name in model_admin.routes()
    }


def test_permissions__the_matrix_covers_every_page_action_and_bulk_action(
    redis_ns: RedisNamespace, insp: Inspector
) -> None:
    target = Target(dead_task(), "c" * 32)
    covered = {resolve(urlsplit(url(target)).path).url_name for _n, _m, url, _f, _p in ACTIONS}
    assert covered == admin_routes()
    page = login(make_user("root", superuser=True)).get(TASKS, {"state": "dead"})
    offered = set(re.findall(r'<option value="(\w+_selected)"', page.content.decode()))
    ticked = {form["action"] for _n, _m, _u, form, _p in ACTIONS if "action" in form}
    assert offered
    assert ticked == offered


def test_csrf__every_form_of_every_page_carries_the_token(
    redis_ns: RedisNamespace, insp: Inspector
) -> None:
    ours, _theirs = hostile_records(redis_ns)
    Fails.enqueue(Note("later"), delay=60)
    call = WaitFlow.start(Wait())  # its page has two forms of its own: cancel and signal
    drain()
    client = login(make_user("root", superuser=True), enforce_csrf_checks=True)
    pages = [QUEUES, f"{TASKS}?state=dead", f"{TASKS}?state=dead&queue=default", task_url(ours),
             task_url(ours, action="delete"), queue_url("delete_all_dead"),
             queue_url("retry_all_dead"), SCHEDULES, schedule_url("sync"), WORKERS, RUNS,
             run_url(call)]  # fmt: skip
    forms = {}
    for page in pages:
        body = client.get(page).content.decode()
        found = re.findall(r"<form[^>]*method=\"post\"[^>]*>(.*?)</form>", body, re.S | re.I)
        forms[page] = len(found)
        for form in found:
            assert 'name="csrfmiddlewaretoken"' in form, page
    assert sum(forms.values()) >= 10
    assert forms[run_url(call)] == forms[WORKERS] + 2  # the header's (log out) and its two


# -- the list's query string under a fuzzer --------------------------------------------------

PARAMS = st.fixed_dictionaries(
    {},
    optional={
        name: st.one_of(
            st.text(max_size=40),
            st.sampled_from(["dead", "default", "oldest", "-1", "0", str(10**30), SCRIPT]),
            st.integers().map(str),
        )
        for name in ("queue", "state", "job", "q", "o", "p", "start", "at")
    },
)


def test_fuzz__the_tasks_list_answers_any_query_without_a_500(
    redis_ns: RedisNamespace, insp: Inspector
) -> None:
    hostile_records(redis_ns)
    client = login(make_user("root", superuser=True))

    @hypothesis_settings(
        max_examples=60, deadline=None, database=None, derandomize=True,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(params=PARAMS)
    def run(params: dict[str, str]) -> None:
        clean = {k: v.replace("\x00", "") for k, v in params.items()}
        response = client.get(TASKS, clean)
        assert response.status_code in (200, 404), clean
        body = response.content.decode()
        for raw in RAW:
            assert raw not in body, clean

    run()


def test_search__a_huge_search_is_cut_to_max_input(
    redis_ns: RedisNamespace, insp: Inspector
) -> None:
    client = login(make_user("root", superuser=True))

    response = client.get(TASKS, {"state": "dead", "q": "k" * 100_000, "job": "j" * 100_000})

    assert response.status_code == 200
    assert response.context["listing"].query == "k" * MAX_INPUT
    assert response.context["listing"].job == "j" * MAX_INPUT


def test_search__no_page_or_api_read_runs_scan_or_keys(
    private_redis: RedisServer, settings: Any
) -> None:
    schedule = {"sync": {"job": SyncAccounts.name, "every": 30}}
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url, "NAMESPACE": "noscan",
                     "SCHEDULE": schedule}  # fmt: skip
    ours = dead_task(SCRIPT)
    Fails.enqueue(Note("later"), delay=60)
    call = WaitFlow.start(Wait())
    drain()
    admin_client = login(make_user("root", superuser=True))
    api = APIClient()
    api.force_authenticate(make_user("api-root", superuser=True))
    redis = private_redis.client()
    redis.config_resetstat()

    searches = [{"state": s, "q": "key-", "job": Fails.name} for s in ("dead", "scheduled")]
    for url, query in [
        *((TASKS, q) for q in [{}, {"state": "dead", "q": ours}, *searches]),
        *((TASKS, {**q, "queue": "default"}) for q in searches),
        (QUEUES, {}), (WORKERS, {}), (SCHEDULES, {}), (schedule_url("sync"), {}),
        (task_url(ours), {}), (RUNS, {}), (RUNS, {"q": "x", "flow": "y"}), (run_url(call), {}),
    ]:  # fmt: skip
        assert admin_client.get(url, query).status_code == 200, (url, query)
    jobs_api = ["", "/failed?job=x", "/tasks?state=dead&job=x&per_page=200", f"/{ours}",
                "/schedules"]  # fmt: skip
    for url in [*(f"/api/v1/admin/jobs{p}" for p in jobs_api), "/api/v1/admin/flows?flow=x",
                f"/api/v1/admin/flows/{call}"]:  # fmt: skip
        assert api.get(url).status_code == 200, url

    ran = redis.info("commandstats")
    assert "cmdstat_evalsha" in ran or "cmdstat_eval" in ran  # the reads reached Redis
    assert {"cmdstat_scan", "cmdstat_keys"} & set(ran) == set(), sorted(ran)
