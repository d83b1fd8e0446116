"""The queues page: every queue with its tasks per state and today's counters; pause, resume,
and the actions on all of a queue's dead tasks (each asks first, saying how many); below them
the transactional outbox (its depth, oldest row's age, held rows and last relay)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from django_jobs.admin.pages import JobsAdmin, Notice, plural, tasks_url, url
from django_jobs.backends.outbox import overview
from django_jobs.conf import get_settings
from django_jobs.inspector import Inspector
from django_jobs.keys import State
from django_jobs.models import Queue


@dataclass(frozen=True)
class QueueRow:
    """A queue on the queues page, each count linked to its tasks."""

    name: str
    paused: bool
    counts: list[tuple[str, int, str]]
    #: Pending tasks waiting for a slot of their job type's concurrency_limit.
    parked: int
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
                    parked=q.parked,
                    processed_today=q.processed_today,
                    failed_today=q.failed_today,
                )
                for q in insp.queues()
            ]
            return {"queues": rows}

        # The outbox is in the database: shown even when Redis cannot be read.
        outbox: dict[str, Any] = {"outbox": overview(), "outbox_on": get_settings().outbox}
        return self.render(request, "queues.html", "Queues", build, **outbox)

    def pause(self, request: HttpRequest, queue: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Notice:
            insp.pause(queue)
            text = f"Queue {queue} is paused: workers take no new task from it until resumed."
            return messages.SUCCESS, text

        return self.act(
            request, self.has_change_permission(request), change, url("queue_changelist")
        )

    def resume(self, request: HttpRequest, queue: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Notice:
            insp.resume(queue)
            return messages.SUCCESS, f"Queue {queue} is resumed."

        return self.act(
            request, self.has_change_permission(request), change, url("queue_changelist")
        )

    def _all_dead(self, request: HttpRequest, queue: str, action: DeadAction) -> HttpResponse:
        """Ask (GET), then act (POST) on every dead task of the queue."""
        self.check_queue(queue)
        if not action.allowed(self, request):
            raise PermissionDenied
        back = tasks_url(queue, State.DEAD)
        if request.method == "POST":

            def change(insp: Inspector) -> Notice:
                count = plural(action.run(insp, queue), "dead task")
                return messages.SUCCESS, action.done.format(count=count, queue=queue)

            return self.act(request, True, change, back)

        def build(insp: Inspector) -> dict[str, Any]:
            count = plural(next(q.dead for q in insp.queues() if q.name == queue), "dead task")
            return {"question": action.question.format(count=count, queue=queue)}

        return self.confirm(request, action.title, build, action.button, back)

    def retry_all_dead(self, request: HttpRequest, queue: str) -> HttpResponse:
        return self._all_dead(request, queue, RETRY_ALL_DEAD)

    def delete_all_dead(self, request: HttpRequest, queue: str) -> HttpResponse:
        return self._all_dead(request, queue, DELETE_ALL_DEAD)


@dataclass(frozen=True)
class DeadAction:
    """An action on all of a queue's dead tasks; its texts name {count} and {queue}."""

    allowed: Callable[[JobsAdmin, HttpRequest], bool]
    run: Callable[[Inspector, str], int]
    title: str
    question: str
    button: str
    done: str


RETRY_ALL_DEAD = DeadAction(
    lambda page, request: page.has_change_permission(request),
    Inspector.retry_all_dead,
    "Retry all dead tasks",
    "Run all {count} of queue {queue} again now, each with a fresh budget of attempts?",
    "Yes, retry them",
    "{count} of {queue} will run now.",
)
DELETE_ALL_DEAD = DeadAction(
    lambda page, request: page.has_delete_permission(request),
    Inspector.delete_all_dead,
    "Delete all dead tasks",
    "Delete all {count} of queue {queue}? They cannot be retried afterwards, and their "
    "idempotency keys are released.",
    "Yes, delete them",
    "Deleted {count} of {queue}.",
)
