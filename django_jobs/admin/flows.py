"""The flows pages: runs by status (search by call id, paging), a run's page with its steps as
a timeline, its signals and errors, and the actions: cancel, and send a signal from a form.

The runs are read through django_jobs.flows (list_runs, get_run_detail), never Redis directly;
the pages check Task's permissions (view_task to look, change_task to cancel and signal) and say
what Redis' outage or JOBS being disabled means, as every page of the section (pages.py).
An unknown call id answers 404. A signal's value is JSON typed in the form (empty: null).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse

from django_jobs.admin.pages import JobsAdmin, Notice, url
from django_jobs.flows import STATUSES, FlowError, cancel, list_runs, send_signal
from django_jobs.flows.base import CALL_ID_RE
from django_jobs.flows.details import get_run_detail
from django_jobs.inspector import Inspector
from django_jobs.models import FlowRun

#: Runs on one page of the list.
PER_PAGE = 50
#: What a step's kind is called on the timeline.
KINDS = {"step": "step", "sleep": "sleep", "wait": "wait for signal", "parallel": "parallel",
         "item": "item"}  # fmt: skip
FINISHED = ("succeeded", "failed", "canceled")
#: The states of a step whose next time (a wake, a deadline, a retry) is still ahead.
AHEAD = ("sleeping", "waiting", "retrying")


def run_url(call_id: str) -> str:
    """The page of one run."""
    return url("flowrun_change", call_id)


def unknown(call_id: str) -> Http404:
    return Http404(f"No flow run {call_id!r} (never started, or past JOBS['FLOW_RETENTION']).")


#: The highest page number read (as the API's `page`): a hand-edited ?p= past it reads this one.
MAX_PAGE = 10_000


def _page(value: str | None) -> int:
    try:
        return min(max(1, int(value or 1)), MAX_PAGE)
    except ValueError:
        return 1


@admin.register(FlowRun)
class FlowRunAdmin(JobsAdmin):
    """Runs by status, a run's timeline, cancel and send a signal."""

    def routes(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            *super().routes(),
            ("<str:call_id>/", self.run_view, "change"),
            ("<str:call_id>/cancel/", self.cancel_run, "cancel"),
            ("<str:call_id>/signal/", self.signal_run, "signal"),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        status = request.GET.get("status", "")
        if status and status not in STATUSES:
            raise Http404(f"Unknown status {status!r}: one of {', '.join(STATUSES)}.")
        flow = request.GET.get("flow", "").strip()
        query = request.GET.get("q", "").strip()
        page = _page(request.GET.get("p"))

        def link(**changes: str | int) -> str:
            params: dict[str, str | int] = {"status": status, "flow": flow, **changes}
            return url("flowrun_changelist", **{k: v for k, v in params.items() if v})

        def build(insp: Inspector) -> dict[str, Any]:
            if query:
                detail = get_run_detail(query) if CALL_ID_RE.match(query) else None
                runs = [detail.run] if detail else []
                return {"rows": [(r, run_url(r.call_id)) for r in runs], "searched": True}
            found = list_runs(flow or None, status or None, page=page, per_page=PER_PAGE)
            return {
                "rows": [(r, run_url(r.call_id)) for r in found],
                "previous_url": link(p=page - 1) if page > 1 else "",
                "next_url": link(p=page + 1) if found.has_next else "",
            }

        only_flow = {"flow": flow} if flow else {}
        statuses = [("All", link(), not status)] + [
            (s.capitalize(), url("flowrun_changelist", status=s, **only_flow), s == status)
            for s in STATUSES
        ]
        return self.render(request, "flows.html", "Flow runs", build, status=status, flow=flow,
                           query=query, page=page, statuses=statuses)  # fmt: skip

    def run_view(self, request: HttpRequest, call_id: str) -> HttpResponse:
        def build(insp: Inspector) -> dict[str, Any]:
            detail = get_run_detail(call_id)
            if detail is None:
                raise unknown(call_id)
            run = detail.run
            # A step's next time only while it is ahead (a received wait keeps its deadline).
            timeline = [
                (step, KINDS.get(step.kind, step.kind), step.state in AHEAD and step.next_at)
                for step in run.steps
            ]
            return {
                "detail": detail,
                "run": run,
                "timeline": timeline,
                "finished": run.status in FINISHED,
                "input": json.dumps(run.input, indent=2, ensure_ascii=False, sort_keys=True),
                "metadata": json.dumps(run.metadata, indent=2, ensure_ascii=False, sort_keys=True),
                "output": json.dumps(run.output, indent=2, ensure_ascii=False, sort_keys=True),
                "signals": [
                    (s.name, json.dumps(s.value, ensure_ascii=False)) for s in detail.signals
                ],
                "failed_steps": [s for s in run.steps if s.error],
                "parent_url": run_url(detail.parent) if detail.parent else "",
                "waits": [s.name for s in run.steps if s.kind == "wait" and s.state == "waiting"],
            }

        return self.render(request, "flow.html", f"Flow run {call_id}", build, call_id=call_id)

    def _act(
        self, request: HttpRequest, call_id: str, change: Callable[[], Notice]
    ) -> HttpResponse:
        """One change to a run (change_task, POST), then back to the run's page."""

        def guarded(insp: Inspector) -> Notice:
            if get_run_detail(call_id) is None:
                raise unknown(call_id)
            return change()

        return self.act(request, self.has_change_permission(request), guarded, run_url(call_id))

    def cancel_run(self, request: HttpRequest, call_id: str) -> HttpResponse:
        def change() -> Notice:
            reason = request.POST.get("reason", "").strip() or "canceled in the admin"
            if cancel(call_id, reason):
                return messages.SUCCESS, (
                    f"Flow run {call_id} is canceled (a running step is interrupted first)."
                )
            return messages.WARNING, f"Flow run {call_id} has already ended: nothing to cancel."

        return self._act(request, call_id, change)

    def signal_run(self, request: HttpRequest, call_id: str) -> HttpResponse:
        def change() -> Notice:
            name = request.POST.get("name", "").strip()
            raw = request.POST.get("value", "").strip()
            if not name:
                return messages.ERROR, "Give the signal a name (the one the flow waits for)."
            try:
                value = json.loads(raw) if raw else None
            except ValueError as exc:
                return messages.ERROR, (
                    f'The value is not JSON ({exc}): write it as JSON, e.g. "text", 42, '
                    f'{{"amount": 1999}}, or leave it empty for null.'
                )
            try:
                taken = send_signal(call_id, name, value, outbox=False)
            except FlowError as exc:
                return messages.ERROR, str(exc)
            if taken:
                return messages.SUCCESS, f"Signal {name!r} sent to flow run {call_id}."
            return messages.WARNING, (
                f"Signal {name!r} was not taken: the run has ended, a signal of that name was "
                f"delivered already, or its wait timed out."
            )

        return self._act(request, call_id, change)
