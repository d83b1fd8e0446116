"""The queues page: every queue with its tasks per state and today's counters; pause, resume,
and the actions on all of a queue's dead tasks (each asks first, saying how many)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from django_jobs.admin.pages import JobsAdmin, Notice, plural, tasks_url, url
from django_jobs.inspector import Inspector
from django_jobs.keys import State
from django_jobs.models import Queue


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

    def _all_dead(
        self,
        request: HttpRequest,
        queue: str,
        allowed: bool,
        ask: tuple[str, Callable[[str], str], str],
        change: Callable[[Inspector], Notice],
    ) -> HttpResponse:
        """Ask (GET), then act (POST) on every dead task of the queue. ask: the page's title,
        its question given how many dead tasks there are, and the button's words."""
        self.check_queue(queue)
        if not allowed:
            raise PermissionDenied
        back = tasks_url(queue, State.DEAD)
        if request.method == "POST":
            return self.act(request, True, change, back)
        title, question, button = ask

        def build(insp: Inspector) -> dict[str, Any]:
            dead = next(q.dead for q in insp.queues() if q.name == queue)
            return {"question": question(plural(dead, "dead task"))}

        return self.confirm(request, title, build, button, back)

    def retry_all_dead(self, request: HttpRequest, queue: str) -> HttpResponse:
        def change(insp: Inspector) -> Notice:
            count = insp.retry_all_dead(queue)
            return messages.SUCCESS, f"{plural(count, 'dead task')} of {queue} will run now."

        def question(count: str) -> str:
            return (
                f"Run all {count} of queue {queue} again now, each with a fresh budget of attempts?"
            )

        ask = ("Retry all dead tasks", question, "Yes, retry them")
        return self._all_dead(request, queue, self.has_change_permission(request), ask, change)

    def delete_all_dead(self, request: HttpRequest, queue: str) -> HttpResponse:
        def change(insp: Inspector) -> Notice:
            count = insp.delete_all_dead(queue)
            return messages.SUCCESS, f"Deleted {plural(count, 'dead task')} of {queue}."

        def question(count: str) -> str:
            return (
                f"Delete all {count} of queue {queue}? They cannot be retried afterwards, and "
                f"their idempotency keys are released."
            )

        ask = ("Delete all dead tasks", question, "Yes, delete them")
        return self._all_dead(request, queue, self.has_delete_permission(request), ask, change)
