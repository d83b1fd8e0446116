"""The schedules page: every configured schedule with its next and last fire; "run now", pause
and resume; and a page per schedule with its fire history (the last fires, newest first).

The schedules come from the settings (JOBS["SCHEDULE"] and the job classes' `schedule`), their
state (last fire, paused) from Redis, both through the Inspector. A name that is not configured
(any more) answers 404. A bad entry (the system checks E020-E027 name it) makes each page and
action say what is wrong instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404, HttpRequest, HttpResponse

from django_jobs.admin.pages import JobsAdmin, Notice, task_page, url
from django_jobs.exceptions import UnknownSchedule
from django_jobs.inspector import Inspector, ScheduleInfo
from django_jobs.models import Schedule
from django_jobs.schedules.firing import HISTORY


def unknown(exc: UnknownSchedule) -> Http404:
    return Http404(str(exc))


def misconfigured(exc: ImproperlyConfigured) -> str:
    """What a page says when JOBS["SCHEDULE"] (or a job class's schedule) has a bad entry."""
    return f"The schedules are misconfigured: {exc}. Run manage.py check to see every problem."


def schedule_url(name: str) -> str:
    """The page of one schedule (its fire history)."""
    return url("schedule_change", name)


def last_task_url(info: ScheduleInfo) -> str:
    """The page of the task the schedule last enqueued, or "" before its first fire."""
    if info.last_task_id is None or info.last_task_queue is None:
        return ""
    return task_page(info.last_task_queue, info.last_task_id)


@admin.register(Schedule)
class ScheduleAdmin(JobsAdmin):
    """Every schedule with its next and last fire, paused flag, "run now", pause and resume."""

    def routes(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            *super().routes(),
            # <path:>: a schedule's name may hold "/"; the actions first (see tasks.py).
            ("<path:name>/run/", self.run_now, "run"),
            ("<path:name>/pause/", self.pause, "pause"),
            ("<path:name>/resume/", self.resume, "resume"),
            ("<path:name>/", self.schedule_view, "change"),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        def build(insp: Inspector) -> dict[str, Any]:
            try:
                schedules = insp.schedules()
            except ImproperlyConfigured as exc:
                return {"problem": misconfigured(exc)}
            return {
                "schedules": [
                    (info, info.job.split("."), schedule_url(info.name), last_task_url(info))
                    for info in schedules
                ]
            }

        return self.render(request, "schedules.html", "Schedules", build)

    def schedule_view(self, request: HttpRequest, name: str) -> HttpResponse:
        def build(insp: Inspector) -> dict[str, Any]:
            try:
                info = insp.schedule(name)
                fires = insp.fire_history(name)
            except UnknownSchedule as exc:
                raise unknown(exc) from None
            except ImproperlyConfigured as exc:
                return {"problem": misconfigured(exc)}
            return {
                "schedule": info,
                "last_task_url": last_task_url(info),
                "fires": [(fire, task_page(fire.queue, fire.task_id)) for fire in fires],
                "kept": HISTORY,
            }

        return self.render(request, "schedule.html", f"Schedule {name}", build, name=name)

    def _act(
        self, request: HttpRequest, name: str, change: Callable[[Inspector], Notice]
    ) -> HttpResponse:
        """Make a change to one schedule (change_task, POST) and go back where it was asked."""

        def guarded(insp: Inspector) -> Notice:
            try:
                return change(insp)
            except UnknownSchedule as exc:
                raise unknown(exc) from None
            except ImproperlyConfigured as exc:
                return messages.ERROR, misconfigured(exc)

        back = url("schedule_change", name) if request.GET.get("back") == "schedule" else ""
        return self.act(
            request,
            self.has_change_permission(request),
            guarded,
            back or url("schedule_changelist"),
        )

    def run_now(self, request: HttpRequest, name: str) -> HttpResponse:
        def change(insp: Inspector) -> Notice:
            task_id = insp.run_schedule_now(name)
            return messages.SUCCESS, (
                f"Schedule {name} enqueued task {task_id} now; its next fire time still fires."
            )

        return self._act(request, name, change)

    def pause(self, request: HttpRequest, name: str) -> HttpResponse:
        def change(insp: Inspector) -> Notice:
            insp.pause_schedule(name)
            return messages.SUCCESS, (
                f"Schedule {name} is paused: its fire times pass without a task until resumed."
            )

        return self._act(request, name, change)

    def resume(self, request: HttpRequest, name: str) -> HttpResponse:
        def change(insp: Inspector) -> Notice:
            insp.resume_schedule(name)
            return (
                messages.SUCCESS,
                f"Schedule {name} is resumed: it fires from its next fire time.",
            )

        return self._act(request, name, change)
