"""The jobs admin API's cancel: `POST /api/v1/admin/jobs/<id>/cancel` (change_task, as retry).

A waiting task (pending, scheduled, retry) is canceled at once, a running one asked to stop
(django_jobs.canceling): both answer 200 with the outcome and the task as it is now. A task that
had already ended (completed, dead, canceled) answers 409 with its state, an unknown id 404.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from django_jobs.api.serializers import ConflictSerializer, TaskDetailSerializer
from django_jobs.api.views import (
    BAD_REQUEST,
    COMMON,
    NOT_FOUND,
    TASK_ID_PARAMETER,
    Conflict,
    JobsAPIView,
)
from django_jobs.broker.protocol import CancelOutcome
from django_jobs.canceling import cancel_task, said


class TaskCancelSerializer(serializers.Serializer[dict[str, Any]]):
    """What a cancel did."""

    outcome = serializers.ChoiceField(
        choices=[CancelOutcome.CANCELED.value, CancelOutcome.REQUESTED.value],
        help_text="canceled: it was waiting, and will not run; requested: it is running, and "
        "is asked to stop (JobCanceled is raised in it within a heartbeat); it ends canceled.",
    )
    detail = serializers.CharField(help_text="The outcome in words.")
    task = TaskDetailSerializer(
        allow_null=True, help_text="The task now; null when its retention is 0 (deleted)."
    )


@extend_schema(tags=["jobs"], parameters=[TASK_ID_PARAMETER])
class TaskCancelView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_task_cancel",
        summary="Cancel a task: a waiting one now, a running one asked to stop",
        request=None,
        responses={
            200: TaskCancelSerializer,
            400: BAD_REQUEST,
            404: NOT_FOUND,
            409: OpenApiResponse(ConflictSerializer, "The task had already ended."),
            **COMMON,
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Cancel a pending, scheduled or retrying task now; ask a running one to stop."""
        info = self.find(task_id)
        inspector = self.inspector()
        answer = cancel_task(inspector.broker, task_id, info.queue)
        if answer.outcome is CancelOutcome.NOT_FOUND:
            raise NotFound(f"No task {task_id} in any queue (it went away meanwhile).")
        if answer.outcome is CancelOutcome.FINISHED:
            raise Conflict({"detail": said(task_id, answer), "state": answer.state})
        data = {
            "outcome": answer.outcome.value,
            "detail": said(task_id, answer),
            "task": inspector.task(info.queue, task_id),
        }
        return Response(TaskCancelSerializer(data).data)
