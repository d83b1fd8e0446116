"""The admin's cancel: the "Cancel" button of a task's page and the list's "Cancel selected
tasks" action (TaskAdmin's). Each needs change_task and a POST (with its CSRF token, as every
admin change); a waiting task is canceled at once, a running one asked to stop (see
django_jobs.canceling).
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_jobs.admin.pages import JobsAdmin, Notice, plural, task_page
from django_jobs.broker.protocol import CancelOutcome
from django_jobs.canceling import TOOK, cancel_task, said
from django_jobs.inspector import Inspector, TaskInfo
from django_jobs.keys import State

#: The states a task may be canceled from: waiting to run, or running.
CANCELABLE = frozenset({State.PENDING, State.SCHEDULED, State.RETRY, State.ACTIVE})


def may_cancel(task: TaskInfo) -> bool:
    """Whether the task's page offers to cancel it (not once a running one was asked to)."""
    return task.state in CANCELABLE and task.cancel_requested_at is None


class CancelActions(JobsAdmin):
    """TaskAdmin's cancel views."""

    def cancel_view(self, request: HttpRequest, queue: str, task_id: str) -> HttpResponse:
        self.check_queue(queue)

        def change(insp: Inspector) -> Notice:
            answer = cancel_task(insp.broker, task_id, queue)
            level = messages.SUCCESS if answer.outcome in TOOK else messages.WARNING
            return level, said(task_id, answer)

        then = task_page(queue, task_id)
        return self.act(request, self.has_change_permission(request), change, then)

    def cancel_selected(
        self,
        request: HttpRequest,
        ids: list[str],
        where: Callable[[Inspector], dict[str, str]],
        back: str,
    ) -> HttpResponse:
        """Cancel the ticked tasks (`where`: the queue of each), and say how many of each."""

        def change(insp: Inspector) -> Notice:
            outcomes = [cancel_task(insp.broker, t, q).outcome for t, q in where(insp).items()]
            canceled = outcomes.count(CancelOutcome.CANCELED)
            asked = outcomes.count(CancelOutcome.REQUESTED)
            text = f"Canceled {plural(canceled, 'task')}."
            if asked:
                text += f" Asked {plural(asked, 'running task')} to stop (they end canceled)."
            left = len(ids) - canceled - asked
            if left:
                text += f" {plural(left, 'task')} had already ended or gone: not canceled."
            return (messages.WARNING if left else messages.SUCCESS), text

        return self.act(request, self.has_change_permission(request), change, back)
