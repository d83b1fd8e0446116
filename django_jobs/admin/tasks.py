"""The tasks list (one list for every state), a task's page, and the actions on tasks.

Filtering by job or searching by idempotency key cannot use an index (Redis holds none), so it
goes through the Inspector's task listing, reading at most SCAN_LIMIT tasks per request, and
offers to search further. Searching by id looks the task up directly in every queue. Deleting
many tasks first shows a confirmation page that says how many.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect

from django_jobs.admin.pages import (
    JobsAdmin,
    Notice,
    not_found,
    payload,
    plural,
    task_url,
    tasks_url,
    url,
)
from django_jobs.conf import get_settings
from django_jobs.exceptions import TaskRunning
from django_jobs.inspector import RETRY_RULE, Inspector, TaskInfo, may_retry
from django_jobs.jobs import registry
from django_jobs.keys import State
from django_jobs.models import Task

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


@dataclass(frozen=True)
class Row:
    """A task on the tasks list, with the cells of its state's columns."""

    task: TaskInfo
    url: str
    payload: str
    #: (TaskInfo attribute, value) for each of the state's COLUMNS.
    cells: list[tuple[str, object]]


@dataclass(frozen=True)
class ListQuery:
    """What the tasks list shows, read from the query string."""

    queue: str
    state: str
    job: str
    query: str
    newest_first: bool
    page: int
    start: int

    @classmethod
    def from_request(cls, request: HttpRequest) -> ListQuery:
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
        """This list's URL with some parameters changed (paging starts over unless given)."""
        query: dict[str, str | int] = {"queue": self.queue, "state": self.state}
        if self.job:
            query["job"] = self.job
        if self.query:
            query["q"] = self.query
        if not self.newest_first:
            query["o"] = "oldest"
        query.update(changes)
        return url("task_changelist", **{k: v for k, v in query.items() if v != ""})


def _number(value: str | None, least: int) -> int:
    try:
        return max(least, int(value or least))
    except ValueError:
        return least


def _attempts(task: TaskInfo) -> object:
    return f"{task.attempts} of {task.max_attempts}" if task.max_attempts else task.attempts


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
        listing = ListQuery.from_request(request)
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

    def read_listing(self, insp: Inspector, listing: ListQuery) -> dict[str, Any]:
        queues = insp.queues()
        context: dict[str, Any] = {}
        if listing.query and (found := insp.find(listing.query)):
            # A search by id shows the task wherever it is, with the columns of its state.
            state = found.state if found.state in State.ALL else listing.state
            listing = ListQuery(found.queue, state, "", listing.query, True, 1, 0)
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
            "retry_all_dead_url": url("queue_retry_all_dead", listing.queue),
            "delete_all_dead_url": url("queue_delete_all_dead", listing.queue),
        }

    def scan(self, insp: Inspector, listing: ListQuery) -> dict[str, Any]:
        """One page of matches of the job filter and the idempotency-key search, read in order
        from listing.start through the Inspector's task listing, at most SCAN_LIMIT tasks."""
        found = insp.list_tasks(
            listing.state,
            (listing.queue,),
            offsets={listing.queue: listing.start},
            job=listing.job or None,
            key_contains=listing.query,
            per_page=PER_PAGE,
            newest_first=listing.newest_first,
            chunk=SCAN_CHUNK,
            budget=SCAN_LIMIT,
        )
        position = (found.next_offsets or {}).get(listing.queue, found.total)
        return {
            "items": found.items,
            "total": found.total,
            "scanned": (listing.start + 1, min(position, found.total)),
            "further_url": listing.url(start=position) if found.next_offsets else "",
            "first_url": listing.url() if listing.start else "",
        }

    def row(self, task: TaskInfo, state: str) -> Row:
        cells: list[tuple[str, object]] = []
        for _, attribute in COLUMNS[state]:
            value = _attempts(task) if attribute == "attempts" else getattr(task, attribute)
            cells.append((attribute, value))
        return Row(task=task, url=task_url(task), payload=payload(task), cells=cells)

    def bulk_action(self, request: HttpRequest, listing: ListQuery) -> HttpResponse:
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

            def retry(insp: Inspector) -> Notice:
                done = sum(insp.retry(queue, task_id) for task_id in ids)
                text = f"{plural(done, 'task')} will run now."
                if done < len(ids):
                    text += f" {len(ids) - done} could not: {RETRY_RULE}."
                    return messages.WARNING, text
                return messages.SUCCESS, text

            return self.act(request, self.has_change_permission(request), retry, back)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        if request.POST.get("post") != "yes":

            def ask(insp: Inspector) -> dict[str, Any]:
                return {
                    "question": f"Delete {plural(len(ids), 'task')} of queue {queue}?",
                    "items": ids,
                    "fields": [
                        *(("_selected_action", task_id) for task_id in ids),
                        ("action", action),
                        ("post", "yes"),
                    ],
                }

            return self.confirm(request, "Delete tasks", ask, "Yes, delete them", back)

        def delete(insp: Inspector) -> Notice:
            done, running = 0, 0
            for task_id in ids:
                try:
                    done += insp.delete(queue, task_id)
                except TaskRunning:
                    running += 1
            text = f"Deleted {plural(done, 'task')}."
            if running:
                text += f" {plural(running, 'task')} running could not be deleted."
            return (messages.WARNING if done < len(ids) else messages.SUCCESS), text

        return self.act(request, True, delete, back)

    # -- one task ---------------------------------------------------------------------------

    def task_view(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)

        def build(insp: Inspector) -> dict[str, Any]:
            task = insp.task(queue, task_id)
            if task is None:
                raise not_found(queue, task_id)
            return {
                "task": task,
                "fields": [
                    ("ID", task.id),
                    ("Job", task.job or "(undecodable)"),
                    ("Queue", task.queue),
                    ("State", task.state),
                    ("Idempotency key", task.idempotency_key),
                    ("Failed runs", _attempts(task)),
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
                "payload": payload(task, indent=2),
                "can_retry": may_retry(task.state),
                "can_remove": task.state != State.ACTIVE,
                "list_url": tasks_url(queue, task.state),
            }

        return self.render(request, "task.html", f"Task {task_id}", build, queue=queue)

    def retry_task(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Notice:
            if insp.retry(queue, task_id):
                return messages.SUCCESS, f"Task {task_id} will run now."
            return messages.WARNING, f"Task {task_id} was not retried: {RETRY_RULE}."

        then = url("task_change", queue, task_id)
        return self.act(request, self.has_change_permission(request), change, then)

    def delete_task(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        if request.method != "POST":

            def ask(insp: Inspector) -> dict[str, Any]:
                task = insp.task(queue, task_id)
                if task is None:
                    raise not_found(queue, task_id)
                return {
                    "question": f"Delete the {task.state} task {task_id} "
                    f"({task.job or 'undecodable'}) of queue {queue}?",
                    "fields": [("state", task.state)],
                }

            back = url("task_change", queue, task_id)
            return self.confirm(request, "Delete task", ask, "Yes, delete it", back)
        # Back to the list the task was in (a field of the confirmation form).
        state = request.POST.get("state", "")
        then = tasks_url(queue, state if state in State.ALL else State.DEAD)

        def change(insp: Inspector) -> Notice:
            if insp.delete(queue, task_id):
                return messages.SUCCESS, f"Deleted task {task_id}."
            return messages.WARNING, f"Task {task_id} was already gone."

        return self.act(request, True, change, then)
