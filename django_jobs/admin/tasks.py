"""The tasks list (one list for every state), a task's page, and the actions on tasks.

The list shows every queue at once by default, merged on the state's time as the API's
`/failed` does (the Inspector's task listing, paged by its cursor); the queue is a filter and a
column. One queue without a filter is paged by number. Filtering by job or searching by
idempotency key cannot use an index (Redis holds none): it visits at most SCAN_LIMIT tasks per
request, what matches decided in Redis, and offers to search further; the key column then shows
the part that matched.
Searching by id looks the task up directly in every queue. Deleting many tasks first shows a
confirmation page that says how many.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_jobs.admin.cancel import CancelActions, may_cancel
from django_jobs.admin.listing import COLUMNS, ListQuery, Row, attempts, job_name, matched
from django_jobs.admin.pages import (
    Notice,
    not_found,
    payload,
    plural,
    task_page,
    task_url,
    tasks_url,
    unquoted,
    url,
)
from django_jobs.conf.redact import redacted
from django_jobs.cursor import InvalidCursor, decode_cursor, encode_cursor
from django_jobs.exceptions import TaskRunning
from django_jobs.inspector import RETRY_RULE, Inspector, TaskInfo, may_retry
from django_jobs.jobs import registry
from django_jobs.keys import State, logical_queue
from django_jobs.models import Task

#: Tasks on one page of the tasks list.
PER_PAGE = 100
#: Tasks read per round trip, and at most per request, when a job filter or a search scans.
SCAN_CHUNK = 1000
SCAN_LIMIT = 10_000


@admin.register(Task)
class TaskAdmin(CancelActions):
    """One list for every state, a page per task, and the actions on tasks."""

    def routes(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            *super().routes(),
            # The id quoted (task_page): one written by hand may hold "/", even end in "/retry".
            ("<str:queue>/<str:task_id>/retry/", unquoted(self.retry_task), "retry"),
            ("<str:queue>/<str:task_id>/delete/", unquoted(self.delete_task), "delete"),
            ("<str:queue>/<str:task_id>/cancel/", unquoted(self.cancel_view), "cancel"),
            ("<str:queue>/<str:task_id>/", unquoted(self.task_view), "change"),
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
            listing = ListQuery(found.queue, state, "", listing.query, True, 1, "")
            context.update(listing=listing, found=True, items=[found], total=1)
        elif listing.paged:
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
        else:
            counts = {q.name: q.count(listing.state) for q in queues}
            context.update(self.merged(insp, listing, counts))
        listed = [q for q in queues if q.name in listing.queues]
        key_query = "" if context.get("found") else listing.query
        return {
            **context,
            "rows": [self.row(t, listing.state, key_query) for t in context["items"]],
            "columns": [heading for heading, _ in COLUMNS[listing.state]],
            "key_column": bool(key_query),
            "all_queues_url": listing.url(queue=""),
            "all_queues_count": sum(q.count(listing.state) for q in queues),
            "queue_filter": [
                (q.name, q.count(listing.state), listing.url(queue=q.name)) for q in queues
            ],
            "state_filter": [
                (s, sum(q.count(s) for q in listed), listing.url(state=s)) for s in State.ALL
            ],
            "job_filter": [
                (name, listing.url(job=name))
                for name in sorted({*registry.jobs, listing.job} - {""})
            ],
            "all_jobs_url": listing.url(job=""),
            "newest_url": listing.url(o=""),
            "oldest_url": listing.url(o="oldest"),
            "dead_count": sum(q.dead for q in listed) if listing.queue else 0,
            "retry_all_dead_url": url("queue_retry_all_dead", listing.queue or "-"),
            "delete_all_dead_url": url("queue_delete_all_dead", listing.queue or "-"),
        }

    def merged(self, insp: Inspector, listing: ListQuery, counts: dict[str, int]) -> dict[str, Any]:
        """One page of the Inspector's listing over listing.queues, merged on the state's time,
        from listing.at: every queue's tasks, or the matches of the job filter and the key
        search among at most SCAN_LIMIT tasks read."""
        queues = listing.queues
        try:
            offsets = decode_cursor(listing.at, queues) if listing.at else None
        except InvalidCursor:
            offsets = None  # a hand-made link: start from the newest
        scanning = bool(listing.job or listing.query)
        chunk = SCAN_CHUNK if scanning else PER_PAGE
        found = insp.list_tasks(
            listing.state,
            queues,
            offsets=offsets,
            job=listing.job or None,
            key_contains=listing.query,
            per_page=PER_PAGE,
            newest_first=listing.newest_first,
            chunk=chunk,
            budget=SCAN_LIMIT if scanning else 2 * chunk * len(queues),
        )
        left = found.next_offsets or {}
        # How far the listing has gone: a queue missing from a cursor has been read to its end.
        start = 0 if offsets is None else _gone(offsets, queues, counts)
        position = _gone(left, queues, counts)
        further = listing.url(at=encode_cursor(left)) if left else ""
        return {
            "items": found.items,
            "total": found.total,
            "scanned": (start + 1, min(position, found.total)) if scanning else None,
            "further_url": further,
            "first_url": listing.url() if listing.at else "",
        }

    def row(self, task: TaskInfo, state: str, key_query: str = "") -> Row:
        cells: list[tuple[str, object, str]] = []
        for heading, attribute in COLUMNS[state]:
            value = attempts(task) if attribute == "attempts" else getattr(task, attribute)
            cells.append((attribute, value, heading))
        split = None if task.sensitive else matched(task.idempotency_key, key_query)
        return Row(task=task, url=task_url(task), cells=cells, matched=split)

    def bulk_action(self, request: HttpRequest, listing: ListQuery) -> HttpResponse:
        """Retry, cancel or delete the tasks ticked on the list (deleting asks first)."""
        action = request.POST.get("action", "")
        ids = request.POST.getlist("_selected_action")
        back = request.get_full_path()
        if action not in ("retry_selected", "cancel_selected", "delete_selected") or not ids:
            self.message_user(
                request,
                "Pick an action and tick some tasks first. Nothing was changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        queue = listing.queue

        def where(insp: Inspector) -> dict[str, str]:
            """The queue of each ticked task: the list's, or found in every queue."""
            return dict.fromkeys(ids, queue) if queue else insp.locate(ids)

        if action == "retry_selected":

            def retry(insp: Inspector) -> Notice:
                done = sum(insp.retry(q, task_id) for task_id, q in where(insp).items())
                text = f"{plural(done, 'task')} will run now."
                if done < len(ids):
                    text += f" {len(ids) - done} could not: {RETRY_RULE}."
                    return messages.WARNING, text
                return messages.SUCCESS, text

            return self.act(request, self.has_change_permission(request), retry, back)
        if action == "cancel_selected":
            return self.cancel_selected(request, ids, where, back)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        if request.POST.get("post") != "yes":

            def ask(insp: Inspector) -> dict[str, Any]:
                return {
                    "question": f"Delete {plural(len(ids), 'task')} of "
                    + (f"queue {queue}?" if queue else "every queue?"),
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
            for task_id, q in where(insp).items():
                try:
                    done += insp.delete(q, task_id)
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
                    ("Job", job_name(task) or "(undecodable)"),
                    ("Queue", task.queue),
                    ("State", task.state),
                    ("Idempotency key", redacted(task.idempotency_key, task.sensitive)),
                    ("Failed runs", attempts(task)),
                    ("Crashes", task.crashes),
                ],
                "times": [
                    ("Enqueued", task.enqueued_at),
                    ("Started", task.started_at),
                    ("Due" if task.state == State.SCHEDULED else "Next attempt", task.next_at),
                    ("Failed", task.failed_at),
                    ("Died", task.died_at),
                    ("Completed", task.completed_at),
                    ("Cancel requested", task.cancel_requested_at),
                    ("Canceled", task.canceled_at),
                ],
                "payload": payload(task, indent=2),
                "can_retry": may_retry(task.state),
                "can_cancel": may_cancel(task),
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

        then = task_page(queue, task_id)
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

            back = task_page(queue, task_id)
            return self.confirm(request, "Delete task", ask, "Yes, delete it", back)
        # Back to the list the task was in (a field of the confirmation form).
        state = request.POST.get("state", "")
        then = tasks_url(queue, state if state in State.ALL else State.DEAD)

        def change(insp: Inspector) -> Notice:
            if insp.delete(queue, task_id):
                return messages.SUCCESS, f"Deleted task {task_id}."
            return messages.WARNING, f"Task {task_id} was already gone."

        return self.act(request, True, change, then)


def _gone(offsets: dict[str, int], queues: tuple[str, ...], counts: dict[str, int]) -> int:
    """How far a listing went through queues by its offsets: a queue missing from them has been
    read to its end; a sharded queue's offsets are its shards' (those read to the end left out,
    so it may count short)."""
    gone = 0
    for queue in queues:
        own = [offset for name, offset in offsets.items() if logical_queue(name) == queue]
        gone += sum(own) if own else counts.get(queue, 0)
    return gone
