"""The workers page: where each live worker runs, what it takes, its last heartbeat, its tasks."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from django_jobs.admin.pages import JobsAdmin
from django_jobs.inspector import Inspector
from django_jobs.models import Worker


@admin.register(Worker)
class WorkerAdmin(JobsAdmin):
    """The live workers: where they run, what they take, their last heartbeat, their tasks."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        def build(insp: Inspector) -> dict[str, Any]:
            return {"workers": insp.workers()}

        return self.render(request, "workers.html", "Workers", build)
