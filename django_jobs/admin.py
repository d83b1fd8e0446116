"""The admin's Jobs section: queues, one list of tasks for every state, a task's page, workers.

Table-less, as django-rq does it: Queue, Task and Worker (models.py) are unmanaged models whose
ModelAdmins replace the changelist with pages built from the Inspector, the only way these views
reach Redis. Each page costs a fixed number of round trips, so the first page of 100,000 dead
tasks is as quick as the first page of ten.

- Permissions are Task's (see models.py): view_task to look, change_task to retry, pause and
  resume, delete_task to delete. Every view goes through `admin_site.admin_view` (staff login,
  CSRF) and every change is a POST; deleting many tasks, or retrying every dead task, first shows
  a confirmation page that says how many.
- With REDIS_URL unset each page says that jobs are disabled; with Redis unreachable it says so
  (status 503). The rest of the admin never touches Redis.
- Filtering by job or searching by idempotency key cannot use an index (Redis holds none), so it
  scans the state in order, at most SCAN_LIMIT tasks per request, and offers to search further.
  Searching by id looks the task up directly in every queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import models
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable, JobsDisabled
from django_jobs.inspector import RUNNABLE, Inspector, TaskInfo, get_inspector
from django_jobs.jobs import registry
from django_jobs.keys import State
from django_jobs.models import Queue, Task, Worker

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[models.Model]
else:
    ModelAdmin = admin.ModelAdmin

DISABLED = "jobs are disabled (REDIS_URL is not set)"


def outage(exc: BrokerUnavailable) -> str:
    """What a page says when Redis did not answer, or answered with a refusal."""
    return (
        f"Redis refused: {exc}"
        if isinstance(exc, BrokerRefused)
        else f"Redis is unreachable: {exc}"
    )


#: Tasks on one page of the tasks list.
PER_PAGE = 100
#: Tasks read per round trip, and at most per request, when a job filter or a search scans.
SCAN_CHUNK = 1000
SCAN_LIMIT = 10_000
#: Columns of the tasks list for each state, between id and job and payload and idempotency
#: key: (heading, TaskInfo attribute).
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    State.SCHEDULED: (("Due", "next_at"), ("Enqueued", "enqueued_at")),
    State.PENDING: (("Enqueued", "enqueued_at"), ("Failed runs", "attempts")),
    State.ACTIVE: (("Started", "started_at"), ("Failed runs", "attempts")),
    State.RETRY: (
        ("Last error", "error"),
        ("Next attempt", "next_at"),
        ("Failed runs", "attempts"),
        ("Failed", "failed_at"),
    ),
    State.DEAD: (
        ("Last error", "error"),
        ("Died", "died_at"),
        ("Failed runs", "attempts"),
        ("Crashes", "crashes"),
    ),
    State.COMPLETED: (("Completed", "completed_at"), ("Enqueued", "enqueued_at")),
}

#: What a change view hands back: a message level and the message.
Outcome = tuple[int, str]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _payload(task: TaskInfo, indent: int | None = None) -> str:
    if task.payload is None:
        return task.raw
    return json.dumps(task.payload, indent=indent, ensure_ascii=False, sort_keys=True)


def _url(name: str, *args: str, **query: str | int) -> str:
    url = reverse(f"admin:django_jobs_{name}", args=args)
    return f"{url}?{urlencode(query)}" if query else url


def tasks_url(queue: str, state: str, **query: str | int) -> str:
    """The tasks list filtered by queue and state."""
    return _url("task_changelist", queue=queue, state=state, **query)


def task_url(task: TaskInfo) -> str:
    """The page of one task."""
    return _url("task_change", task.queue, task.id)


class JobsAdmin(ModelAdmin):
    """A page of the Jobs section: Task's permissions, no database, everything via the Inspector."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.has_perm("django_jobs.view_task") or self.has_change_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.has_perm("django_jobs.change_task")

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.has_perm("django_jobs.delete_task")

    def routes(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        """(route, view, URL name suffix) of this page's views; the first is the changelist."""
        return [("", self.changelist_view, "changelist")]

    def get_urls(self) -> list[URLPattern]:
        prefix = f"django_jobs_{self.opts.model_name}"
        return [
            path(route, self.admin_site.admin_view(view), name=f"{prefix}_{name}")
            for route, view, name in self.routes()
        ]

    def check_queue(self, queue: str) -> None:
        """Answer 404 for a queue that is not in JOBS["QUEUES"]."""
        if queue not in get_settings().queues:
            raise Http404(f"No queue named {queue!r} in JOBS['QUEUES'].")

    def render(
        self,
        request: HttpRequest,
        template: str,
        title: str,
        build: Callable[[Inspector], dict[str, Any]],
        **extra: Any,
    ) -> HttpResponse:
        """Render a page from what build reads, or say why Redis cannot be read."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "can_change": self.has_change_permission(request),
            "can_delete": self.has_delete_permission(request),
            "states": State.ALL,
            # Before Django 6.1, object tools belong inside the content block (see base.html).
            "tools_in_content": django.VERSION < (6, 1),
            **extra,
        }
        status = 200
        try:
            context.update(build(get_inspector()))
        except JobsDisabled:
            context["problem"] = DISABLED
        except BrokerUnavailable as exc:
            context["problem"] = outage(exc)
            status = 503
        return TemplateResponse(request, f"admin/django_jobs/{template}", context, status=status)

    def act(
        self,
        request: HttpRequest,
        allowed: bool,
        change: Callable[[Inspector], Outcome],
        then: str,
    ) -> HttpResponse:
        """Make one change (POST only), report it as a message and redirect to then."""
        if not allowed:
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            level, text = change(get_inspector())
        except JobsDisabled:
            level, text = messages.ERROR, DISABLED
        except BrokerUnavailable as exc:
            level, text = messages.ERROR, outage(exc)
        except ValueError as exc:  # a running task cannot be deleted
            level, text = messages.ERROR, str(exc)
        self.message_user(request, text, level)
        return HttpResponseRedirect(then)

    def confirm(
        self,
        request: HttpRequest,
        title: str,
        ask: Callable[[Inspector], dict[str, Any]],
        button: str,
        back: str,
    ) -> HttpResponse:
        """Ask before a change (the answer POSTs to this same URL); ask gives the question.

        ask returns {"question": ..., "items": [...] to list, "fields": [(name, value), ...]},
        the fields being sent back with the answer.
        """
        return self.render(request, "confirm.html", title, ask, button=button, back=back)


@dataclass(frozen=True)
class QueueRow:
    """A queue on the queues page, each count linked to its tasks."""

    name: str
    paused: bool
    counts: list[tuple[str, int, str]]
    processed_today: int
    failed_today: int


@admin.register(Queue)
class QueueAdmin(JobsAdmin):
    """Every queue with its tasks per state and today's counters; pause, resume, all dead."""

    def routes(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            *super().routes(),
            ("<str:queue>/pause/", self.pause, "pause"),
            ("<str:queue>/resume/", self.resume, "resume"),
            ("<str:queue>/retry-all-dead/", self.retry_all_dead, "retry_all_dead"),
            ("<str:queue>/delete-all-dead/", self.delete_all_dead, "delete_all_dead"),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        def build(insp: Inspector) -> dict[str, Any]:
            rows = [
                QueueRow(
                    name=q.name,
                    paused=q.paused,
                    counts=[(s, q.count(s), tasks_url(q.name, s)) for s in State.ALL],
                    processed_today=q.processed_today,
                    failed_today=q.failed_today,
                )
                for q in insp.queues()
            ]
            return {"queues": rows}

        return self.render(request, "queues.html", "Queues", build)

    def pause(self, request: HttpRequest, queue: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Outcome:
            insp.pause(queue)
            text = f"Queue {queue} is paused: workers take no new task from it until resumed."
            return messages.SUCCESS, text

        return self.act(
            request, self.has_change_permission(request), change, _url("queue_changelist")
        )

    def resume(self, request: HttpRequest, queue: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Outcome:
            insp.resume(queue)
            return messages.SUCCESS, f"Queue {queue} is resumed."

        return self.act(
            request, self.has_change_permission(request), change, _url("queue_changelist")
        )

    def _dead(self, queue: str, insp: Inspector) -> int:
        return next(q.dead for q in insp.queues() if q.name == queue)

    def retry_all_dead(self, request: HttpRequest, queue: str) -> HttpResponse:
        self.check_queue(queue)
        if not self.has_change_permission(request):
            raise PermissionDenied
        back = tasks_url(queue, State.DEAD)
        if request.method != "POST":

            def ask(insp: Inspector) -> dict[str, Any]:
                count = _plural(self._dead(queue, insp), "dead task")
                return {
                    "question": f"Run all {count} of queue {queue} again now, each with a fresh "
                    f"budget of attempts?"
                }

            return self.confirm(request, "Retry all dead tasks", ask, "Yes, retry them", back)

        def change(insp: Inspector) -> Outcome:
            count = insp.retry_all_dead(queue)
            return messages.SUCCESS, f"{_plural(count, 'dead task')} of {queue} will run now."

        return self.act(request, True, change, back)

    def delete_all_dead(self, request: HttpRequest, queue: str) -> HttpResponse:
        self.check_queue(queue)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        back = tasks_url(queue, State.DEAD)
        if request.method != "POST":

            def ask(insp: Inspector) -> dict[str, Any]:
                count = _plural(self._dead(queue, insp), "dead task")
                return {
                    "question": f"Delete all {count} of queue {queue}? They cannot be retried "
                    f"afterwards, and their idempotency keys are released."
                }

            return self.confirm(request, "Delete all dead tasks", ask, "Yes, delete them", back)

        def change(insp: Inspector) -> Outcome:
            count = insp.delete_all_dead(queue)
            return messages.SUCCESS, f"Deleted {_plural(count, 'dead task')} of {queue}."

        return self.act(request, True, change, back)


@dataclass(frozen=True)
class Row:
    """A task on the tasks list, with the cells of its state's columns."""

    task: TaskInfo
    url: str
    payload: str
    #: (TaskInfo attribute, value) for each of the state's COLUMNS.
    cells: list[tuple[str, object]]


@dataclass(frozen=True)
class Listing:
    """What the tasks list shows, read from the query string."""

    queue: str
    state: str
    job: str
    query: str
    newest_first: bool
    page: int
    start: int

    @classmethod
    def from_request(cls, request: HttpRequest) -> Listing:
        queues = get_settings().queues
        get = request.GET
        queue = get.get("queue") or queues[0]
        state = get.get("state") or State.DEAD
        if queue not in queues or state not in State.ALL:
            raise Http404("Unknown queue or state.")
        return cls(
            queue=queue,
            state=state,
            job=get.get("job", ""),
            query=get.get("q", "").strip(),
            newest_first=get.get("o") != "oldest",
            page=_number(get.get("p"), 1),
            start=_number(get.get("start"), 0),
        )

    def url(self, **changes: str | int) -> str:
        """This listing's URL with some parameters changed (paging starts over unless given)."""
        query: dict[str, str | int] = {"queue": self.queue, "state": self.state}
        if self.job:
            query["job"] = self.job
        if self.query:
            query["q"] = self.query
        if not self.newest_first:
            query["o"] = "oldest"
        query.update(changes)
        return _url("task_changelist", **{k: v for k, v in query.items() if v != ""})

    def matches(self, task: TaskInfo) -> bool:
        """Whether a scanned task passes the job filter and the idempotency-key search."""
        if self.job and task.job != self.job:
            return False
        return not self.query or self.query in (task.idempotency_key or "")


def _number(value: str | None, least: int) -> int:
    try:
        return max(least, int(value or least))
    except ValueError:
        return least


@admin.register(Task)
class TaskAdmin(JobsAdmin):
    """One list for every state, a page per task, and the actions on tasks."""

    def routes(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            *super().routes(),
            ("<str:queue>/<str:task_id>/", self.task_view, "change"),
            ("<str:queue>/<str:task_id>/retry/", self.retry_task, "retry"),
            ("<str:queue>/<str:task_id>/delete/", self.delete_task, "delete"),
        ]

    # -- the list ---------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        listing = Listing.from_request(request)
        if request.method == "POST":
            if not (self.has_change_permission(request) or self.has_delete_permission(request)):
                raise PermissionDenied
            return self.bulk_action(request, listing)
        return self.render(
            request,
            "tasks.html",
            "Tasks",
            lambda insp: self.read_listing(insp, listing),
            listing=listing,
        )

    def read_listing(self, insp: Inspector, listing: Listing) -> dict[str, Any]:
        queues = insp.queues()
        context: dict[str, Any] = {}
        if listing.query and (found := insp.find(listing.query)):
            # A search by id shows the task wherever it is, with the columns of its state.
            state = found.state if found.state in State.ALL else listing.state
            listing = Listing(found.queue, state, "", listing.query, True, 1, 0)
            context.update(listing=listing, found=True, items=[found], total=1)
        elif listing.job or listing.query:
            context.update(self.scan(insp, listing))
        else:
            page = insp.tasks(
                listing.queue,
                listing.state,
                page=listing.page,
                per_page=PER_PAGE,
                newest_first=listing.newest_first,
            )
            # A Paginator over a range counts pages without reading anything.
            paginator = Paginator(range(page.total), PER_PAGE)
            numbers = paginator.get_elided_page_range(min(listing.page, paginator.num_pages))
            context.update(
                items=page.items,
                total=page.total,
                pages=[
                    (n, listing.url(p=n) if isinstance(n, int) and n != listing.page else "")
                    for n in numbers
                ],
                page=listing.page,
            )
        info = {q.name: q for q in queues}
        current = info[listing.queue]
        return {
            **context,
            "rows": [self.row(t, listing.state) for t in context["items"]],
            "columns": [heading for heading, _ in COLUMNS[listing.state]],
            "queue_filter": [
                (q.name, q.count(listing.state), listing.url(queue=q.name)) for q in queues
            ],
            "state_filter": [(s, current.count(s), listing.url(state=s)) for s in State.ALL],
            "job_filter": [
                (name, listing.url(job=name))
                for name in sorted({*registry.jobs, listing.job} - {""})
            ],
            "all_jobs_url": listing.url(job=""),
            "newest_url": listing.url(o=""),
            "oldest_url": listing.url(o="oldest"),
            "dead_count": current.dead,
            "retry_all_dead_url": _url("queue_retry_all_dead", listing.queue),
            "delete_all_dead_url": _url("queue_delete_all_dead", listing.queue),
        }

    def scan(self, insp: Inspector, listing: Listing) -> dict[str, Any]:
        """Read the state in order from listing.start until a page of matches or SCAN_LIMIT."""
        items: list[TaskInfo] = []
        position = listing.start
        total = 0
        while len(items) < PER_PAGE and position < listing.start + SCAN_LIMIT:
            chunk = position // SCAN_CHUNK
            page = insp.tasks(
                listing.queue,
                listing.state,
                page=chunk + 1,
                per_page=SCAN_CHUNK,
                newest_first=listing.newest_first,
            )
            total = page.total
            batch = page.items[position - chunk * SCAN_CHUNK :]
            if not batch:
                break
            for task in batch:
                position += 1
                if listing.matches(task):
                    items.append(task)
                    if len(items) == PER_PAGE:
                        break
        more = position < total
        return {
            "items": items,
            "total": total,
            "scanned": (listing.start + 1, min(position, total)),
            "further_url": listing.url(start=position) if more else "",
            "first_url": listing.url() if listing.start else "",
        }

    def row(self, task: TaskInfo, state: str) -> Row:
        cells: list[tuple[str, object]] = []
        for _, attribute in COLUMNS[state]:
            value: object = getattr(task, attribute)
            if attribute == "attempts" and task.max_attempts:
                value = f"{task.attempts} of {task.max_attempts}"
            cells.append((attribute, value))
        return Row(task=task, url=task_url(task), payload=_payload(task), cells=cells)

    def bulk_action(self, request: HttpRequest, listing: Listing) -> HttpResponse:
        """Retry or delete the tasks ticked on the list (deleting asks first)."""
        action = request.POST.get("action", "")
        ids = request.POST.getlist("_selected_action")
        back = request.get_full_path()
        if action not in ("retry_selected", "delete_selected") or not ids:
            self.message_user(
                request,
                "Pick an action and tick some tasks first. Nothing was changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        queue = listing.queue
        if action == "retry_selected":

            def retry(insp: Inspector) -> Outcome:
                done = sum(insp.retry(queue, task_id) for task_id in ids)
                text = f"{_plural(done, 'task')} will run now."
                if done < len(ids):
                    text += (
                        f" {len(ids) - done} could not: only scheduled, retry and dead tasks can."
                    )
                    return messages.WARNING, text
                return messages.SUCCESS, text

            return self.act(request, self.has_change_permission(request), retry, back)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        if request.POST.get("post") != "yes":

            def ask(insp: Inspector) -> dict[str, Any]:
                return {
                    "question": f"Delete {_plural(len(ids), 'task')} of queue {queue}?",
                    "items": ids,
                    "fields": [
                        *(("_selected_action", task_id) for task_id in ids),
                        ("action", action),
                        ("post", "yes"),
                    ],
                }

            return self.confirm(request, "Delete tasks", ask, "Yes, delete them", back)

        def delete(insp: Inspector) -> Outcome:
            done, running = 0, 0
            for task_id in ids:
                try:
                    done += insp.delete(queue, task_id)
                except ValueError:
                    running += 1
            text = f"Deleted {_plural(done, 'task')}."
            if running:
                text += f" {_plural(running, 'task')} running could not be deleted."
            return (messages.WARNING if done < len(ids) else messages.SUCCESS), text

        return self.act(request, True, delete, back)

    # -- one task ---------------------------------------------------------------------------

    def task_view(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)

        def build(insp: Inspector) -> dict[str, Any]:
            task = insp.task(queue, task_id)
            if task is None:
                raise Http404(f"Task {task_id} is not in queue {queue} (any more).")
            attempts = f"{task.attempts} of {task.max_attempts}" if task.max_attempts else ""
            return {
                "task": task,
                "fields": [
                    ("ID", task.id),
                    ("Job", task.job or "(undecodable)"),
                    ("Queue", task.queue),
                    ("State", task.state),
                    ("Idempotency key", task.idempotency_key),
                    ("Failed runs", attempts or task.attempts),
                    ("Crashes", task.crashes),
                ],
                "times": [
                    ("Enqueued", task.enqueued_at),
                    ("Started", task.started_at),
                    ("Due" if task.state == State.SCHEDULED else "Next attempt", task.next_at),
                    ("Failed", task.failed_at),
                    ("Died", task.died_at),
                    ("Completed", task.completed_at),
                ],
                "payload": _payload(task, indent=2),
                "can_retry": task.state in RUNNABLE,
                "can_remove": task.state != State.ACTIVE,
                "list_url": tasks_url(queue, task.state),
            }

        return self.render(request, "task.html", f"Task {task_id}", build, queue=queue)

    def retry_task(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Outcome:
            if insp.retry(queue, task_id):
                return messages.SUCCESS, f"Task {task_id} will run now."
            return messages.WARNING, (
                f"Task {task_id} was not retried: only scheduled, retry and dead tasks can be."
            )

        then = _url("task_change", queue, task_id)
        return self.act(request, self.has_change_permission(request), change, then)

    def delete_task(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        if request.method != "POST":

            def ask(insp: Inspector) -> dict[str, Any]:
                task = insp.task(queue, task_id)
                if task is None:
                    raise Http404(f"Task {task_id} is not in queue {queue} (any more).")
                return {
                    "question": f"Delete the {task.state} task {task_id} "
                    f"({task.job or 'undecodable'}) of queue {queue}?",
                    "fields": [("state", task.state)],
                }

            back = _url("task_change", queue, task_id)
            return self.confirm(request, "Delete task", ask, "Yes, delete it", back)
        # Back to the list the task was in (a field of the confirmation form).
        state = request.POST.get("state", "")
        then = tasks_url(queue, state if state in State.ALL else State.DEAD)

        def change(insp: Inspector) -> Outcome:
            if insp.delete(queue, task_id):
                return messages.SUCCESS, f"Deleted task {task_id}."
            return messages.WARNING, f"Task {task_id} was already gone."

        return self.act(request, True, change, then)


@admin.register(Worker)
class WorkerAdmin(JobsAdmin):
    """The live workers: where they run, what they take, their last heartbeat, their tasks."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        def build(insp: Inspector) -> dict[str, Any]:
            return {"workers": insp.workers()}

        return self.render(request, "workers.html", "Workers", build)
