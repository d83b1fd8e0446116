"""The admin's Jobs section with Django's test client against the real Redis.

Tasks reach their states through real jobs run by run_burst; users are staff with all of Task's
permissions, with some of them, with none, and a superuser.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from django_jobs import Job, admin
from django_jobs.admin import tasks as task_pages
from django_jobs.client import get_broker
from django_jobs.inspector import Inspector, get_inspector
from django_jobs.message import Message, encode
from django_jobs.testing import run_burst
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace, free_port

pytestmark = pytest.mark.django_db

QUEUES = reverse("admin:django_jobs_queue_changelist")
TASKS = reverse("admin:django_jobs_task_changelist")
WORKERS = reverse("admin:django_jobs_worker_changelist")


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


class Flaky(Job[Note]):
    """Fails its first run (of five): the task goes to retry."""

    max_attempts = 5

    def run(self, payload: Note) -> None:
        raise RuntimeError("not yet")


# -- users ----------------------------------------------------------------------------------


def make_user(name: str, *perms: str, staff: bool = True, superuser: bool = False) -> User:
    # No password (force_login needs none): hashing one costs more than most of these tests.
    user = User.objects.create_user(name, is_staff=staff or superuser, is_superuser=superuser)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_jobs", codename=codename)
        )
    return user


def login(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def staff() -> Client:
    """Staff with every permission of the Jobs section."""
    return login(make_user("operator", "view_task", "change_task", "delete_task"))


@pytest.fixture
def viewer() -> Client:
    return login(make_user("viewer", "view_task"))


@pytest.fixture
def insp(redis_ns: RedisNamespace) -> Inspector:
    return get_inspector()


def text(response: HttpResponse) -> str:
    """The page's text with tags stripped and entities decoded, whitespace collapsed."""
    # <wbr> (where a dotted job name may break) is no space.
    body = re.sub(r"<[^>]+>", " ", response.content.decode().replace("<wbr>", ""))
    return " ".join(html.unescape(body).split())


def notes(response: HttpResponse) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def dead_task(text: str = "x", **options: Any) -> str:
    task_id = Fails.enqueue(Note(text), **options).id
    run_burst()
    return task_id


def task_url(task_id: str, queue: str = "default", action: str = "") -> str:
    name = f"admin:django_jobs_task_{action or 'change'}"
    return reverse(name, args=[queue, task_id])


def queue_url(action: str, queue: str = "default") -> str:
    return reverse(f"admin:django_jobs_queue_{action}", args=[queue])


def state_of(insp: Inspector, task_id: str, queue: str = "default") -> str | None:
    info = insp.task(queue, task_id)
    return info.state if info else None


# -- the admin index ------------------------------------------------------------------------


def test_index__shows_the_jobs_section_with_permission(staff: Client) -> None:
    response = staff.get(reverse("admin:index"))

    assert response.status_code == 200
    body = response.content.decode()
    assert "Jobs" in body
    for url in (QUEUES, TASKS, WORKERS):
        assert f'href="{url}"' in body
    assert "/admin/django_jobs/task/add/" not in body


def test_index__hides_the_jobs_section_without_permission() -> None:
    client = login(make_user("clerk"))

    body = client.get(reverse("admin:index")).content.decode()

    assert QUEUES not in body
    assert "django_jobs" not in body


# -- queues ---------------------------------------------------------------------------------


def test_queues__shows_depths_counters_and_paused(staff: Client, insp: Inspector) -> None:
    # Given one completed, one retry and one dead task, one scheduled and two pending in
    # default, and a paused low queue.
    Noop.enqueue(Note("done"))
    Flaky.enqueue(Note("again"))
    Fails.enqueue(Note("dead"))
    run_burst()
    Noop.enqueue(Note("later"), delay=3600)
    Noop.enqueue(Note("a"))
    Noop.enqueue(Note("b"))
    insp.pause("low")

    response = staff.get(QUEUES)

    assert response.status_code == 200
    page = text(response)
    # Columns: scheduled, pending, parked, active, retry, dead, completed, canceled, processed,
    # failed, status.
    assert "default 1 2 0 0 1 1 1 0 1 2 Running Pause" in page
    assert "critical 0 0 0 0 0 0 0 0 0 0 Running Pause" in page
    assert "low 0 0 0 0 0 0 0 0 0 0 Paused Resume" in page
    body = response.content.decode()
    assert 'href="{}"'.format(admin.tasks_url("default", "dead").replace("&", "&amp;")) in body


def test_queues__pause_and_resume(staff: Client, insp: Inspector) -> None:
    response = staff.post(queue_url("pause"))

    assert response.status_code == 302
    assert response["Location"] == QUEUES
    assert [q.paused for q in insp.queues()] == [False, True, False]
    assert notes(response) == [
        "Queue default is paused: workers take no new task from it until resumed."
    ]
    assert "default 0 0 0 0 0 0 0 0 0 0 Paused Resume" in text(staff.get(QUEUES))

    staff.post(queue_url("resume"))

    assert [q.paused for q in insp.queues()] == [False, False, False]


def test_queues__changes_only_by_post(staff: Client, insp: Inspector) -> None:
    response = staff.get(queue_url("pause"))

    assert response.status_code == 405
    assert [q.paused for q in insp.queues()] == [False, False, False]


def test_queues__unknown_queue_is_404(staff: Client, insp: Inspector) -> None:
    assert staff.post(queue_url("pause", "nope")).status_code == 404
    assert staff.get(TASKS, {"queue": "nope"}).status_code == 404
    assert staff.get(task_url("x", queue="nope")).status_code == 404


# -- the tasks list -------------------------------------------------------------------------


def test_tasks__lists_dead_tasks_with_their_error(staff: Client, insp: Inspector) -> None:
    first = dead_task("one", idempotency_key="order-1")
    second = dead_task("two")

    response = staff.get(TASKS, {"queue": "default", "state": "dead"})

    assert response.status_code == 200
    page = text(response)
    headings = "ID Queue Job Last error Died Failed runs Crashes"
    assert headings in page
    body = response.content.decode()
    # Newest death first, each row linking to its task page.
    assert body.index(task_url(second)) < body.index(task_url(first))
    assert "RuntimeError: boom one" in page
    assert "RuntimeError: boom two" in page
    assert f"{first[:12]}… default {Fails.name} RuntimeError: boom one 20" in page
    # The payload and the idempotency key are on the task's page, not in the list.
    assert "order-1" not in page
    assert "1 of 1" in page
    assert "2 dead tasks" in page


def listed(response: HttpResponse) -> list[str]:
    """The ids of the tasks on a list page, in order."""
    return re.findall(r'name="_selected_action" value="(\w+)"', response.content.decode())


def test_tasks__default_to_every_queue_s_dead_tasks_merged_by_time(
    staff: Client, insp: Inspector
) -> None:
    # Given dead tasks in three queues, dying in this order.
    order = [dead_task(queue=q) for q in ("critical", "low", "default", "critical")]

    response = staff.get(TASKS)

    assert response.status_code == 200
    # Every queue at once, the newest death first, each row with its queue.
    assert listed(response) == order[::-1]
    page = text(response)
    assert "4 dead tasks in every queue" in page
    assert "ID Queue Job Last error Died" in page
    assert f"{order[1][:12]}… low {Fails.name}" in page
    assert "All (4)" in page  # the queue filter's first choice, selected
    assert re.search(r'<li class="selected"><a href="[^"]*">All \(4\)', response.content.decode())
    # The queue is a filter.
    critical = staff.get(TASKS, {"queue": "critical"})
    assert listed(critical) == [order[3], order[0]]


def test_tasks__every_queue_pages_by_cursor(
    staff: Client, insp: Inspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_pages, "PER_PAGE", 2)
    order = [dead_task(queue=q) for q in ("low", "default", "low", "critical", "default")]

    first = staff.get(TASKS, {"state": "dead"})
    assert listed(first) == order[::-1][:2]
    pages = [listed(first)]
    response = first
    while (more := re.search(r'href="([^"]+)">Next page', response.content.decode())) is not None:
        response = staff.get(html.unescape(more.group(1)))
        pages.append(listed(response))
        assert len(pages) < 5
    assert pages == [order[::-1][:2], order[::-1][2:4], order[::-1][4:]]
    assert "Newest first" in text(response)  # back to the first page

    oldest = staff.get(TASKS, {"state": "dead", "o": "oldest"})
    assert listed(oldest) == order[:2]


def test_tasks__act_on_tasks_ticked_in_every_queue(staff: Client, insp: Inspector) -> None:
    low, critical = dead_task(queue="low"), dead_task(queue="critical")

    retried = staff.post(
        admin.tasks_url("", "dead").replace("queue=&", ""),
        {"action": "retry_selected", "_selected_action": [low, critical]},
        follow=True,
    )

    assert "2 tasks will run now." in notes(retried)
    assert state_of(insp, low, "low") == "pending"
    assert state_of(insp, critical, "critical") == "pending"
    asked = staff.post(
        TASKS + "?state=pending", {"action": "delete_selected", "_selected_action": [low]}
    )
    assert "Delete 1 task of every queue?" in text(asked)
    staff.post(
        TASKS + "?state=pending",
        {"action": "delete_selected", "_selected_action": [low, critical], "post": "yes"},
    )
    assert insp.task("low", low) is None
    assert insp.task("critical", critical) is None


@pytest.mark.parametrize(
    ("state", "headings"),
    [
        ("scheduled", "Due Enqueued"),
        ("pending", "Enqueued Failed runs"),
        ("active", "Started Failed runs"),
        ("retry", "Last error Next attempt Failed runs Failed"),
        ("completed", "Completed Enqueued"),
    ],
)
def test_tasks__columns_follow_the_state(
    staff: Client, insp: Inspector, state: str, headings: str
) -> None:
    # Given one task in each state.
    Noop.enqueue(Note("done"))
    Flaky.enqueue(Note("again"))
    run_burst()
    Noop.enqueue(Note("later"), delay=3600)
    Noop.enqueue(Note("running"))
    assert get_broker().dequeue(["default"]) is not None
    Noop.enqueue(Note("waiting"))

    response = staff.get(TASKS, {"queue": "default", "state": state})

    page = text(response)
    assert f"ID Queue Job {headings}" in page
    (task,) = insp.tasks("default", state).items
    assert task_url(task.id) in response.content.decode()
    if state == "retry":
        assert "RuntimeError: not yet" in page
        assert "1 of 5" in page


def test_tasks__pages_by_100(staff: Client, insp: Inspector) -> None:
    ids = [h.id for h in Noop.enqueue_many([Note(str(n)) for n in range(250)])]

    first = staff.get(TASKS, {"queue": "default", "state": "pending"})
    last = staff.get(TASKS, {"queue": "default", "state": "pending", "p": 3})
    oldest = staff.get(TASKS, {"queue": "default", "state": "pending", "o": "oldest"})
    beyond = staff.get(TASKS, {"queue": "default", "state": "pending", "p": 9})

    def listed(response: HttpResponse) -> list[str]:
        return re.findall(r'name="_selected_action" value="(\w+)"', response.content.decode())

    assert listed(first) == ids[::-1][:100]
    assert listed(last) == ids[::-1][200:]
    assert listed(oldest) == ids[:100]
    assert listed(beyond) == []
    assert "250 pending tasks" in text(first)
    assert 'href="{}"'.format(admin.tasks_url("default", "pending", p=2).replace("&", "&amp;")) in (
        first.content.decode()
    )
    assert '<a aria-current="page">3</a>' in last.content.decode()


def test_tasks__filter_by_job_scans_the_state(
    staff: Client, insp: Inspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 5 pending Noop tasks among 20 Fails tasks (every fifth, the newest first), read 4
    # at a time and at most 12 per request, with pages of 2.
    monkeypatch.setattr(task_pages, "SCAN_CHUNK", 4)
    monkeypatch.setattr(task_pages, "SCAN_LIMIT", 12)
    monkeypatch.setattr(task_pages, "PER_PAGE", 2)
    wanted = []
    for n in range(25):
        job = Noop if n % 5 == 0 else Fails
        handle = job.enqueue(Note(str(n)))
        if job is Noop:
            wanted.append(handle.id)
    wanted.reverse()  # newest first

    query = {"queue": "default", "state": "pending", "job": Noop.name}
    first = staff.get(TASKS, query)

    def listed(response: HttpResponse) -> list[str]:
        return re.findall(r'name="_selected_action" value="(\w+)"', response.content.decode())

    # Noop tasks sit at positions 5, 10, 15, 20 and 25: the first page is full after 10, and
    # the chunk read with it (to 12) holds no other match.
    assert listed(first) == wanted[:2]
    assert "2 matching tasks among tasks 1 to 12 of 25" in text(first)
    further = re.search(r'href="([^"]+)">Search further', first.content.decode())
    assert further is not None
    second = staff.get(html.unescape(further.group(1)))
    assert listed(second) == wanted[2:4]
    assert "2 matching tasks among tasks 13 to 20 of 25" in text(second)
    third = staff.get(TASKS, {**query, "start": 20})
    assert listed(third) == wanted[4:]
    assert "Search further" not in text(third)
    assert "Back to the start" in text(third)


def test_tasks__scan_stops_at_its_limit(
    staff: Client, insp: Inspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_pages, "SCAN_CHUNK", 3)
    monkeypatch.setattr(task_pages, "SCAN_LIMIT", 6)
    Fails.enqueue_many([Note(str(n)) for n in range(10)])

    response = staff.get(TASKS, {"queue": "default", "state": "pending", "job": Noop.name})

    assert "0 matching tasks among tasks 1 to 6 of 10" in text(response)
    assert "Search further" in text(response)


def test_tasks__search_by_id_finds_the_task_anywhere(staff: Client, insp: Inspector) -> None:
    task_id = dead_task(queue="low")

    response = staff.get(TASKS, {"queue": "default", "state": "pending", "q": task_id})

    page = text(response)
    assert f"Task {task_id} found in queue low, dead. It matched by its id." in page
    assert task_url(task_id, queue="low") in response.content.decode()
    assert "Died" in page


def test_tasks__search_by_idempotency_key(staff: Client, insp: Inspector) -> None:
    wanted = Noop.enqueue(Note("a"), idempotency_key="order-17").id
    Noop.enqueue(Note("b"), idempotency_key="order-2")
    Noop.enqueue(Note("c"))

    response = staff.get(TASKS, {"queue": "default", "state": "pending", "q": "order-1"})

    assert re.findall(r'name="_selected_action" value="(\w+)"', response.content.decode()) == [
        wanted
    ]
    assert "1 matching task among tasks 1 to 3 of 3" in text(response)
    # Why it matched: the part of the key that matched is marked.
    assert "Matched by the idempotency key containing “order-1”" in text(response)
    key_cell = re.search(r'<td class="field-idempotency-key"[^>]*>(.*?)</td>', response.text)
    assert key_cell is not None
    assert key_cell.group(1) == "<mark>order-1</mark>7"


def test_tasks__unknown_state_is_404(staff: Client, insp: Inspector) -> None:
    assert staff.get(TASKS, {"state": "archived"}).status_code == 404


def test_tasks__lists_undecodable_records(
    staff: Client, insp: Inspector, redis_ns: RedisNamespace
) -> None:
    task_id = Noop.enqueue(Note("x")).id
    redis_ns.client.hset(get_broker().keys("default").task(task_id), "msg", b"\xff{")

    listing = staff.get(TASKS, {"queue": "default", "state": "pending"})
    page = staff.get(task_url(task_id))

    assert "(undecodable)" in text(listing)
    assert "This record cannot be decoded" in text(page)
    assert "\ufffd{" in text(page)


# -- one task -------------------------------------------------------------------------------


def test_task__shows_everything_about_a_dead_task(staff: Client, insp: Inspector) -> None:
    task_id = dead_task("hello", idempotency_key="greeting-1")

    response = staff.get(task_url(task_id))

    assert response.status_code == 200
    page = text(response)
    for expected in (
        f"ID: {task_id}",
        f"Job: {Fails.name}",
        "Queue: default",
        "State: dead",
        "Idempotency key: greeting-1",
        "Failed runs: 1 of 1",
        "Crashes: 0",
        "Started: 20",
        "Died: 20",
        "Completed: -",
        "RuntimeError: boom hello",
        "Traceback (most recent call last)",
        "Retry now",
        "Delete",
    ):
        assert expected in page, expected
    assert '{\n  "text": "hello"\n}' in html.unescape(response.content.decode())
    assert f'action="{task_url(task_id, action="retry")}"' in response.content.decode()


def test_task__escapes_payload_and_error(staff: Client, insp: Inspector) -> None:
    script = "<script>alert('x')</script>"
    task_id = dead_task(script, idempotency_key=script)

    searched = admin.tasks_url("default", "dead", q=script)
    for url in (task_url(task_id), admin.tasks_url("default", "dead"), searched):
        body = staff.get(url).content.decode()
        assert "<script>alert" not in body, url
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in body, url
    assert task_url(task_id) in staff.get(searched).content.decode()  # found by its key


def test_task__missing_is_404(staff: Client, insp: Inspector) -> None:
    assert staff.get(task_url("missing")).status_code == 404


def test_task__retry_runs_a_dead_task_again(staff: Client, insp: Inspector) -> None:
    task_id = dead_task()

    response = staff.post(task_url(task_id, action="retry"))

    assert response.status_code == 302
    assert response["Location"] == task_url(task_id)
    assert notes(response) == [f"Task {task_id} will run now."]
    assert state_of(insp, task_id) == "pending"


def test_task__retry_of_a_pending_task_warns(staff: Client, insp: Inspector) -> None:
    task_id = Noop.enqueue(Note("x")).id

    response = staff.post(task_url(task_id, action="retry"))

    assert notes(response) == [
        f"Task {task_id} was not retried: only dead and retrying tasks can be retried."
    ]
    assert state_of(insp, task_id) == "pending"
    assert "Retry now" not in text(staff.get(task_url(task_id)))


def test_task__retry_of_a_scheduled_task_warns_as_the_api_refuses(
    staff: Client, insp: Inspector
) -> None:
    # One rule for the admin and the API (inspector.may_retry): a scheduled task runs when due.
    task_id = Noop.enqueue(Note("later"), delay=3600).id

    response = staff.post(task_url(task_id, action="retry"))

    assert notes(response) == [
        f"Task {task_id} was not retried: only dead and retrying tasks can be retried."
    ]
    assert state_of(insp, task_id) == "scheduled"
    assert "Retry now" not in text(staff.get(task_url(task_id)))


def test_task__delete_asks_then_deletes(staff: Client, insp: Inspector) -> None:
    task_id = dead_task()

    question = staff.get(task_url(task_id, action="delete"))
    assert state_of(insp, task_id) == "dead"
    response = staff.post(task_url(task_id, action="delete"), {"state": "dead"})

    assert f"Delete the dead task {task_id} ({Fails.name}) of queue default?" in text(question)
    assert 'name="state" value="dead"' in question.content.decode()
    assert response.status_code == 302
    assert response["Location"] == admin.tasks_url("default", "dead")
    assert notes(response) == [f"Deleted task {task_id}."]
    assert state_of(insp, task_id) is None


def test_task__delete_of_a_running_task_is_refused(staff: Client, insp: Inspector) -> None:
    task_id = Noop.enqueue(Note("x")).id
    assert get_broker().dequeue(["default"]) is not None

    response = staff.post(task_url(task_id, action="delete"), {"state": "active"})

    assert notes(response) == [
        f"Task {task_id} is running (active) and cannot be deleted; wait until it finishes, "
        f"then delete it."
    ]
    assert state_of(insp, task_id) == "active"
    assert "jobs-deletelink" not in staff.get(task_url(task_id)).content.decode()


# -- bulk actions ---------------------------------------------------------------------------


def test_bulk__retry_selected(staff: Client, insp: Inspector) -> None:
    first, second, third = (dead_task(str(n)) for n in range(3))
    url = admin.tasks_url("default", "dead")

    response = staff.post(url, {"action": "retry_selected", "_selected_action": [first, third]})

    assert response.status_code == 302
    assert response["Location"] == url
    assert notes(response) == ["2 tasks will run now."]
    assert [state_of(insp, t) for t in (first, second, third)] == ["pending", "dead", "pending"]


def test_bulk__retry_selected_reports_tasks_that_could_not(staff: Client, insp: Inspector) -> None:
    dead = dead_task()
    pending = Noop.enqueue(Note("x")).id

    response = staff.post(
        admin.tasks_url("default", "dead"),
        {"action": "retry_selected", "_selected_action": [dead, pending]},
    )

    assert notes(response) == [
        "1 task will run now. 1 could not: only dead and retrying tasks can be retried."
    ]


def test_bulk__delete_selected_asks_first(staff: Client, insp: Inspector) -> None:
    first, second = dead_task("1"), dead_task("2")
    url = admin.tasks_url("default", "dead")
    chosen = {"action": "delete_selected", "_selected_action": [first, second]}

    question = staff.post(url, chosen)

    assert question.status_code == 200
    assert "Delete 2 tasks of queue default?" in text(question)
    assert [state_of(insp, t) for t in (first, second)] == ["dead", "dead"]

    response = staff.post(url, {**chosen, "post": "yes"})

    assert notes(response) == ["Deleted 2 tasks."]
    assert [state_of(insp, t) for t in (first, second)] == [None, None]


def test_bulk__without_action_or_selection_changes_nothing(staff: Client, insp: Inspector) -> None:
    task_id = dead_task()
    url = admin.tasks_url("default", "dead")

    no_selection = notes(staff.post(url, {"action": "retry_selected"}, follow=True))
    no_action = notes(staff.post(url, {"_selected_action": [task_id]}, follow=True))

    expected = ["Pick an action and tick some tasks first. Nothing was changed."]
    assert no_selection == no_action == expected
    assert state_of(insp, task_id) == "dead"


def test_dead__retry_all_asks_how_many_then_retries(staff: Client, insp: Inspector) -> None:
    ids = [dead_task(str(n)) for n in range(3)]

    question = staff.get(queue_url("retry_all_dead"))
    response = staff.post(queue_url("retry_all_dead"))

    assert "Run all 3 dead tasks of queue default again now" in text(question)
    assert notes(response) == ["3 dead tasks of default will run now."]
    assert response["Location"] == admin.tasks_url("default", "dead")
    assert {state_of(insp, t) for t in ids} == {"pending"}


def test_dead__delete_all_asks_how_many_then_deletes(staff: Client, insp: Inspector) -> None:
    ids = [dead_task(str(n)) for n in range(2)]
    listing = staff.get(admin.tasks_url("default", "dead"))

    question = staff.get(queue_url("delete_all_dead"))
    response = staff.post(queue_url("delete_all_dead"))

    assert "Delete all dead (2)" in text(listing)
    assert queue_url("delete_all_dead") in listing.content.decode()
    assert "Delete all 2 dead tasks of queue default?" in text(question)
    assert notes(response) == ["Deleted 2 dead tasks of default."]
    assert {state_of(insp, t) for t in ids} == {None}


# -- workers --------------------------------------------------------------------------------


def test_workers__lists_workers_and_their_tasks(staff: Client, insp: Inspector) -> None:
    task_id = Noop.enqueue(Note("x")).id
    delivery = get_broker().dequeue(["default"])
    assert delivery is not None
    info: dict[str, str | int | float] = {
        "host": "web-1",
        "pid": 4242,
        "queues": "critical,default",
        "concurrency": 4,
        "started": time.time(),
    }
    Heartbeat(get_broker(), "web-1:4242:aaaaaa", info, lambda: [delivery]).tick()

    response = staff.get(WORKERS)

    assert response.status_code == 200
    page = text(response)
    assert "web-1 4242 critical, default 1 of 4 20" in page
    assert "0 minutes ago" in page
    assert f"{Noop.name} default {task_id}" in page
    assert task_url(task_id) in response.content.decode()


def test_workers__says_when_none_runs(staff: Client, insp: Inspector) -> None:
    assert "No worker is running" in text(staff.get(WORKERS))


# -- permissions and CSRF -------------------------------------------------------------------

PAGES = [QUEUES, TASKS, WORKERS]


def every_url(task_id: str) -> list[tuple[str, str]]:
    """(method, url) of every page and action of the section."""
    return [
        ("get", QUEUES),
        ("get", TASKS),
        ("get", WORKERS),
        ("get", task_url(task_id)),
        ("post", task_url(task_id, action="retry")),
        ("get", task_url(task_id, action="delete")),
        ("post", task_url(task_id, action="delete")),
        ("post", admin.tasks_url("default", "dead")),
        ("post", queue_url("pause")),
        ("post", queue_url("resume")),
        ("get", queue_url("retry_all_dead")),
        ("post", queue_url("retry_all_dead")),
        ("get", queue_url("delete_all_dead")),
        ("post", queue_url("delete_all_dead")),
    ]


@pytest.mark.parametrize("who", ["anonymous", "not staff"])
def test_permissions__outsiders_are_sent_to_the_login(insp: Inspector, who: str) -> None:
    task_id = dead_task()
    client = Client() if who == "anonymous" else login(make_user("visitor", staff=False))

    for method, url in every_url(task_id):
        response = getattr(client, method)(url)
        assert response.status_code == 302, (method, url)
        assert response["Location"].startswith(reverse("admin:login")), (method, url)

    assert state_of(insp, task_id) == "dead"


def test_permissions__staff_without_permission_get_403(insp: Inspector) -> None:
    task_id = dead_task()
    client = login(make_user("clerk"))

    for method, url in every_url(task_id):
        assert getattr(client, method)(url).status_code == 403, (method, url)

    assert state_of(insp, task_id) == "dead"
    assert [q.paused for q in insp.queues()] == [False, False, False]


def test_permissions__view_only_sees_pages_without_buttons(viewer: Client, insp: Inspector) -> None:
    task_id = dead_task()

    for page in (QUEUES, TASKS, WORKERS, task_url(task_id)):
        response = viewer.get(page)
        assert response.status_code == 200, page
        for button in (">Pause<", "Retry now", "Retry all", "jobs-deletelink", "action-select"):
            assert button not in response.content.decode(), (page, button)
    for method, url in every_url(task_id)[4:]:
        assert getattr(viewer, method)(url).status_code == 403, (method, url)

    assert state_of(insp, task_id) == "dead"


def test_permissions__change_without_delete(insp: Inspector) -> None:
    task_id = dead_task()
    client = login(make_user("retrier", "change_task"))

    page = client.get(task_url(task_id))
    deleting = client.post(task_url(task_id, action="delete"), {"state": "dead"})
    retrying = client.post(task_url(task_id, action="retry"))

    assert page.status_code == 200
    assert "Retry now" in text(page)
    assert "jobs-deletelink" not in page.content.decode()
    assert deleting.status_code == 403
    assert retrying.status_code == 302
    assert state_of(insp, task_id) == "pending"


def test_permissions__delete_with_view(insp: Inspector) -> None:
    task_id = dead_task()
    client = login(make_user("cleaner", "view_task", "delete_task"))

    retrying = client.post(task_url(task_id, action="retry"))
    selected = client.post(
        admin.tasks_url("default", "dead"),
        {"action": "retry_selected", "_selected_action": [task_id]},
    )
    deleting = client.post(task_url(task_id, action="delete"), {"state": "dead"})

    assert (retrying.status_code, selected.status_code, deleting.status_code) == (403, 403, 302)
    assert state_of(insp, task_id) is None


def test_permissions__superuser_may_do_everything(insp: Inspector) -> None:
    task_id = dead_task()
    client = login(make_user("root", superuser=True))

    for url in PAGES:
        assert client.get(url).status_code == 200
    assert client.post(task_url(task_id, action="retry")).status_code == 302

    assert state_of(insp, task_id) == "pending"


def test_csrf__every_change_needs_the_token(insp: Inspector) -> None:
    task_id = dead_task()
    client = login(make_user("operator", "change_task", "delete_task"), enforce_csrf_checks=True)

    for method, url in every_url(task_id):
        if method == "post":
            assert client.post(url, {"state": "dead"}).status_code == 403, url

    assert state_of(insp, task_id) == "dead"
    assert [q.paused for q in insp.queues()] == [False, False, False]
    # With the token from the page's form, the same POST goes through.
    page = client.get(task_url(task_id))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert token is not None
    response = client.post(task_url(task_id, action="retry"), {"csrfmiddlewaretoken": token[1]})
    assert response.status_code == 302
    assert state_of(insp, task_id) == "pending"


# -- without Redis --------------------------------------------------------------------------


def assert_every_page_says(client: Client, message: str, status: int) -> None:
    for url in (*PAGES, task_url("abc"), queue_url("delete_all_dead")):
        response = client.get(url)
        assert response.status_code == status, url
        assert message in text(response), url
    response = client.post(queue_url("pause"))
    assert response.status_code == 302
    assert any(message in note for note in notes(response))
    # The rest of the admin works.
    assert client.get(reverse("admin:index")).status_code == 200
    assert client.get(reverse("admin:password_change")).status_code == 200


def test_disabled__every_page_says_jobs_are_disabled(staff: Client, settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None}

    assert_every_page_says(staff, "jobs are disabled (REDIS_URL is not set)", 200)


def test_unreachable__every_page_says_redis_is_unreachable(staff: Client, settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "ENQUEUE_TIMEOUT": 1}

    assert_every_page_says(staff, "Redis is unreachable", 503)


# -- 100,000 dead tasks ---------------------------------------------------------------------


@pytest.mark.slow_seed
def test_tasks__first_page_of_100k_dead_tasks(
    staff: Client,
    insp: Inspector,
    redis_ns: RedisNamespace,
    record_property: Callable[[str, object], None],
) -> None:
    # Given 100,000 dead tasks written straight into the real key layout, task n dying at
    # second n (so 099999 is the newest).
    k = get_broker().keys("default")
    count = 100_000
    pipe = redis_ns.client.pipeline(transaction=False)
    for n in range(count):
        task_id = f"{n:06d}"
        message = Message(task_id, Fails.name, "default", {"text": str(n)}, 1, 300.0, 0.0)
        died = 1_700_000_000 + n
        pipe.hset(
            k.task(task_id),
            mapping={
                "msg": encode(message),
                "state": "dead",
                "attempts": 1,
                "died_at": died,
                "error": f"RuntimeError: boom {n}",
            },
        )
        pipe.zadd(k.dead, {task_id: died})
        if n % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    staff.get(QUEUES)  # warm up: connections, templates

    started = time.perf_counter()
    response = staff.get(TASKS, {"queue": "default", "state": "dead"})
    elapsed = time.perf_counter() - started

    record_property("seconds", elapsed)
    print(f"\nfirst page of 100,000 dead tasks: {elapsed * 1000:.0f} ms")
    assert response.status_code == 200
    listed = re.findall(r'name="_selected_action" value="(\w+)"', response.content.decode())
    assert listed == [f"{n:06d}" for n in range(99_999, 99_899, -1)]
    page = text(response)
    assert "RuntimeError: boom 99999" in page
    assert "100,000 dead tasks" in page
    assert "Delete all dead (100,000)" in page
