"""What every page of the admin's Jobs section shares: permissions, URLs, rendering a page from
the Inspector, making a change and saying how it went, asking before a change.

Table-less, as django-rq does it: Queue, Task and Worker (models.py) are unmanaged models whose
ModelAdmins replace the changelist with pages built from the Inspector, the only way these views
reach Redis. Each page costs a fixed number of round trips.

- Permissions are Task's (see models.py): view_task to look, change_task to retry, pause and
  resume, delete_task to delete. Every view goes through `admin_site.admin_view` (staff login,
  CSRF) and every change is a POST.
- With REDIS_URL unset each page says that jobs are disabled; with Redis unreachable it says so
  (status 503). The rest of the admin never touches Redis.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
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
from django_jobs.conf.redact import REDACTED
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable, JobsDisabled, TaskRunning
from django_jobs.inspector import Inspector, TaskInfo, get_inspector
from django_jobs.keys import State

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[models.Model]
else:
    ModelAdmin = admin.ModelAdmin

DISABLED = "jobs are disabled (REDIS_URL is not set)"
#: One line per change asked of the admin or the API: who, what, and what came of it.
audit = logging.getLogger("django_jobs.audit")

#: What a change view hands back: a message level and the message.
Notice = tuple[int, str]


def outage(exc: BrokerUnavailable) -> str:
    """What a page says when Redis did not answer, or answered with a refusal."""
    return (
        f"Redis refused: {exc}"
        if isinstance(exc, BrokerRefused)
        else f"Redis is unreachable: {exc}"
    )


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def payload(task: TaskInfo, indent: int | None = None) -> str:
    """A task's payload as JSON, or its raw message when it cannot be decoded; a sensitive
    job's as REDACTED."""
    if task.sensitive:
        return REDACTED
    if task.payload is None:
        return task.raw
    return json.dumps(task.payload, indent=indent, ensure_ascii=False, sort_keys=True)


def url(name: str, *args: str, **query: str | int) -> str:
    """The URL of one of our admin views, with a query string."""
    base = reverse(f"admin:django_jobs_{name}", args=args)
    return f"{base}?{urlencode(query)}" if query else base


def tasks_url(queue: str, state: str, **query: str | int) -> str:
    """The tasks list filtered by queue and state."""
    return url("task_changelist", queue=queue, state=state, **query)


def task_page(queue: str, task_id: str, view: str = "change") -> str:
    """The URL of a task's page, or of its retry, delete or cancel view. The id is quoted as the
    admin quotes primary keys ("/" is "_2F", "_" is "_5F"; the `admin_urlquote` filter in
    templates), so that any id, one written by hand included, is one path segment, and an id
    ending in "/retry" is a page, not an action (`unquoted` reads it back)."""
    return url(f"task_{view}", queue, quote(task_id))


def unquoted(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A task view called with the task id as `task_page` quoted it, given it as it is."""

    @wraps(view)
    def read(request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        return view(request, queue, unquote(task_id))

    return read


def task_url(task: TaskInfo) -> str:
    """The page of one task."""
    return task_page(task.queue, task.id)


def not_found(queue: str, task_id: str) -> Http404:
    return Http404(f"Task {task_id} is not in queue {queue} (any more).")


def _audited(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A view whose refusal of a change (a POST without the permission) the audit logger says."""

    @wraps(view)
    def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except PermissionDenied:
            if request.method == "POST":
                audit.info("admin POST %r by %r: refused, no permission", request.path,
                           request.user.get_username())  # fmt: skip
            raise

    return run


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
            path(route, self.admin_site.admin_view(_audited(view)), name=f"{prefix}_{name}")
            for route, view, name in self.routes()
        ]

    def check_queue(self, queue: str) -> None:
        """Answer 404 for a queue that is not in JOBS["QUEUES"]."""
        if queue not in get_settings().known_queues:
            raise Http404(f"No queue named {queue!r} in JOBS['QUEUES'].")

    def render(
        self,
        request: HttpRequest,
        template: str,
        title: str,
        build: Callable[[Inspector], dict[str, Any]],
        *,
        allowed: bool | None = None,
        **extra: Any,
    ) -> HttpResponse:
        """Render a page from what build reads, or say why Redis cannot be read. Whether the
        user may see it: allowed, by default view_task (or change_task)."""
        if not (self.has_view_permission(request) if allowed is None else allowed):
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
        change: Callable[[Inspector], Notice],
        then: str,
    ) -> HttpResponse:
        """Make one change (POST only), report it as a message and redirect to then; say on
        the audit logger who asked for what, and what came of it."""
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
        except TaskRunning as exc:
            level, text = messages.ERROR, str(exc)
        audit.info("admin POST %r by %r: %r", request.path, request.user.get_username(), text)
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
        the fields being sent back with the answer. The caller has checked the permission of
        the change: a user who may make it may be asked (delete_task alone lets one delete).
        """
        return self.render(
            request, "confirm.html", title, ask, allowed=True, button=button, back=back
        )
