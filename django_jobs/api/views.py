"""The jobs admin API's views: thin DRF views over the Inspector.

Each view checks its input, asks the Inspector, and answers; the errors of the jobs layer become
HTTP errors in `JobsAPIView.handle_exception`, the one place that maps them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from django_jobs.api import audit, limits, listing, permissions
from django_jobs.api.serializers import (
    VALIDATION_ERROR,
    ConflictSerializer,
    CountSerializer,
    ErrorSerializer,
    ListQuerySerializer,
    OverviewSerializer,
    QueueSerializer,
    TaskDetailSerializer,
    TaskListQuerySerializer,
    TaskPageSerializer,
    UnavailableSerializer,
)
from django_jobs.backends.outbox import overview
from django_jobs.conf import get_settings
from django_jobs.exceptions import (
    BrokerUnavailable,
    JobsDisabled,
    TaskRunning,
    UnknownQueue,
    UnknownSchedule,
)
from django_jobs.inspector import (
    RETRY_RULE,
    Inspector,
    QueueInfo,
    TaskInfo,
    get_inspector,
    may_retry,
)
from django_jobs.keys import State, today

if TYPE_CHECKING:
    from rest_framework.permissions import _SupportsHasPermission

#: A task id as enqueue makes them: uuid4().hex.
TASK_ID = re.compile(r"[0-9a-f]{32}")


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The task is not in a state that allows this."
    default_code = "conflict"


class Unavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Jobs are unavailable."
    default_code = "unavailable"


# -- schema pieces --------------------------------------------------------------------------

TASK_ID_PARAMETER = OpenApiParameter(
    "task_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=f"^{TASK_ID.pattern}$",
    description="The task id: 32 lowercase hexadecimal digits.",
)
QUEUE_PARAMETER = OpenApiParameter(
    "queue", OpenApiTypes.STR, OpenApiParameter.PATH, description="A queue of JOBS['QUEUES']."
)
#: Answers every endpoint can give besides its own.
COMMON: dict[int, Any] = {
    401: OpenApiResponse(ErrorSerializer, "Credentials were given and are wrong."),
    403: OpenApiResponse(
        ErrorSerializer,
        "Not signed in, not active staff, without the jobs permission the endpoint needs, "
        "refused by JOBS_API_PERMISSION_CLASSES, or no CSRF token.",
    ),
    503: OpenApiResponse(
        UnavailableSerializer, "Jobs are disabled or misconfigured, or Redis did not answer."
    ),
    **limits.RESPONSES,
}
BAD_REQUEST = OpenApiResponse(VALIDATION_ERROR, "A malformed id or query parameter.")
NOT_FOUND = OpenApiResponse(ErrorSerializer, "No such task (or queue).")


# -- views ----------------------------------------------------------------------------------


class JobsAPIView(audit.Audited):
    """Base of every view: who may call, and how jobs errors become HTTP errors."""

    #: The action of each handler, by method name: the Task permission it needs.
    needs: ClassVar[Mapping[str, permissions.Action]] = {}

    def get_permissions(self) -> Sequence[_SupportsHasPermission]:
        # Signed in, then the admin's rule, always: the setting can only add requirements, so
        # that no setting hands the queues to anonymous users or to users the admin refuses.
        return [
            IsAuthenticated(),
            permissions.JobsModelPermissions(),
            *(cls() for cls in permissions.permission_classes()),
        ]

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, JobsDisabled):
            exc = Unavailable(
                {
                    "detail": "Jobs are disabled: JOBS['REDIS_URL'] is not set.",
                    "code": "jobs_disabled",
                }
            )
        elif isinstance(exc, BrokerUnavailable):
            exc = Unavailable({"detail": str(exc), "code": "broker_unavailable"})
        elif isinstance(exc, ImproperlyConfigured):  # a bad JOBS entry, such as a schedule
            detail = f"The jobs configuration is broken: {exc} (`manage.py check` lists all)."
            exc = Unavailable({"detail": detail, "code": "misconfigured"})
        elif isinstance(exc, UnknownQueue | UnknownSchedule):
            exc = NotFound(str(exc))
        return super().handle_exception(exc)

    def inspector(self) -> Inspector:
        return get_inspector()

    def find(self, task_id: str) -> TaskInfo:
        """Return the task with this id in any queue; 400 if the id is malformed, else 404."""
        if not TASK_ID.fullmatch(task_id):
            raise ValidationError({"task_id": ["A task id is 32 lowercase hexadecimal digits."]})
        info = self.inspector().find(task_id)
        if info is None:
            raise NotFound(f"No task {task_id} in any queue.")
        return info

    def queue(self, name: str) -> QueueInfo:
        for info in self.inspector().queues():
            if info.name == name:
                return info
        raise NotFound(f"No queue {name!r}: the queues are those of JOBS['QUEUES'].")


@extend_schema(tags=["jobs"])
class OverviewView(JobsAPIView):
    needs = {"get": "view"}

    @extend_schema(
        operation_id="jobs_overview",
        summary="Queues and workers at a glance",
        responses={200: OverviewSerializer, **COMMON},
    )
    def get(self, request: Request) -> Response:
        """Queue depths, paused flags, today's counters, live workers, and the outbox."""
        inspector = self.inspector()
        data = {"day": today(), "queues": inspector.queues(), "workers": inspector.workers(),
                "outbox": overview()}  # fmt: skip
        return Response(OverviewSerializer(data).data)


class _ListView(JobsAPIView):
    needs = {"get": "view"}
    query_serializer: type[ListQuerySerializer] = ListQuerySerializer

    def state(self, query: dict[str, Any]) -> str:
        raise NotImplementedError

    def get(self, request: Request) -> Response:
        # A plain dict, not the QueryDict: DRF reads an empty value in a QueryDict as "absent"
        # (HTML form semantics), which would let "?queue=" through as "every queue".
        serializer = self.query_serializer(data=dict(request.query_params.items()))
        serializer.is_valid(raise_exception=True)
        query = serializer.validated_data
        queues = (query["queue"],) if "queue" in query else get_settings().known_queues
        try:
            offsets = listing.decode_cursor(query["cursor"], queues) if "cursor" in query else None
        except listing.InvalidCursor as exc:
            raise ValidationError({"cursor": [str(exc)]}) from exc
        job, per_page = query.get("job"), query["per_page"]
        chunk, budget = listing.bounds(job, per_page, len(queues))
        found = self.inspector().list_tasks(
            self.state(query),
            queues,
            offsets=offsets,
            job=job,
            per_page=per_page,
            newest_first=query["order"] == "newest",
            chunk=chunk,
            budget=budget,
        )
        cursor = listing.encode_cursor(found.next_offsets) if found.next_offsets else None
        url = request.build_absolute_uri()
        data = {
            "total": found.total,
            "scanned": found.scanned,
            "next": replace_query_param(url, "cursor", cursor) if cursor else None,
            "next_cursor": cursor,
            "results": found.items,
        }
        return Response(TaskPageSerializer(data).data)


@extend_schema(tags=["jobs"])
class FailedListView(_ListView):
    def state(self, query: dict[str, Any]) -> str:
        return State.DEAD

    @extend_schema(
        operation_id="jobs_failed_list",
        summary="Dead tasks, newest first",
        parameters=[ListQuerySerializer],
        responses={200: TaskPageSerializer, 400: BAD_REQUEST, **COMMON},
    )
    def get(self, request: Request) -> Response:
        """Dead tasks (out of attempts, or crashed their worker too often) with their last error.

        Paged by cursor: follow `next` until it is null. With a job filter a page may hold
        fewer tasks than per_page (even none) while `next` is set: each request reads a
        bounded number of tasks.
        """
        return super().get(request)


@extend_schema(tags=["jobs"])
class TaskListView(_ListView):
    query_serializer = TaskListQuerySerializer

    def state(self, query: dict[str, Any]) -> str:
        state: str = query["state"]
        return state

    @extend_schema(
        operation_id="jobs_tasks_list",
        summary="Tasks in one state",
        parameters=[TaskListQuerySerializer],
        responses={200: TaskPageSerializer, 400: BAD_REQUEST, **COMMON},
    )
    def get(self, request: Request) -> Response:
        """Tasks in one state, paged by cursor like the dead tasks."""
        return super().get(request)


@extend_schema(tags=["jobs"], parameters=[TASK_ID_PARAMETER])
class TaskView(JobsAPIView):
    needs = {"get": "view", "delete": "delete"}

    @extend_schema(
        operation_id="jobs_task_retrieve",
        summary="One task in full",
        responses={200: TaskDetailSerializer, 400: BAD_REQUEST, 404: NOT_FOUND, **COMMON},
    )
    def get(self, request: Request, task_id: str) -> Response:
        """One task: payload, attempts, last error with its traceback, timestamps."""
        return Response(TaskDetailSerializer(self.find(task_id)).data)

    @extend_schema(
        operation_id="jobs_task_destroy",
        summary="Delete a task",
        responses={
            204: OpenApiResponse(None, "Deleted."),
            400: BAD_REQUEST,
            404: NOT_FOUND,
            409: OpenApiResponse(ConflictSerializer, "The task is running."),
            **COMMON,
        },
    )
    def delete(self, request: Request, task_id: str) -> Response:
        """Delete a task that is not running, and release its idempotency key."""
        info = self.find(task_id)
        try:
            deleted = info.state != State.ACTIVE and self.inspector().delete(info.queue, task_id)
        except TaskRunning:  # it started meanwhile
            deleted = False
            info = dataclasses.replace(info, state=State.ACTIVE)
        if info.state == State.ACTIVE:
            raise Conflict(
                {
                    "detail": f"Task {task_id} is running (active); delete it once it finishes.",
                    "state": State.ACTIVE,
                }
            )
        if not deleted:
            raise NotFound(f"No task {task_id} in any queue (it went away meanwhile).")
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["jobs"], parameters=[TASK_ID_PARAMETER])
class TaskRetryView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_task_retry",
        summary="Retry a dead or retrying task now",
        request=None,
        responses={
            200: TaskDetailSerializer,
            400: BAD_REQUEST,
            404: NOT_FOUND,
            409: OpenApiResponse(ConflictSerializer, "The task is neither dead nor retrying."),
            **COMMON,
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Move a dead or retrying task to pending now; a dead one gets a fresh attempt budget."""
        info = self.find(task_id)
        inspector = self.inspector()
        if may_retry(info.state) and inspector.retry(info.queue, task_id):
            after = inspector.task(info.queue, task_id)
            # Gone already (ran at once with no retention): answer with what was retried.
            return Response(TaskDetailSerializer(after or info).data)
        if may_retry(info.state):  # it moved between the read and the retry: say where to
            moved = inspector.task(info.queue, task_id)
            if moved is None:
                raise NotFound(f"No task {task_id} in any queue (it went away meanwhile).")
            info = moved
        raise Conflict(
            {
                "detail": f"Task {task_id} is {info.state}: {RETRY_RULE}.",
                "state": info.state,
            }
        )


@extend_schema(tags=["jobs"], parameters=[QUEUE_PARAMETER])
class QueuePauseView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_queue_pause",
        summary="Pause a queue",
        request=None,
        responses={200: QueueSerializer, 404: NOT_FOUND, **COMMON},
    )
    def post(self, request: Request, queue: str) -> Response:
        """Stop workers from taking tasks from the queue; running tasks finish."""
        self.inspector().pause(queue)
        return Response(QueueSerializer(self.queue(queue)).data)


@extend_schema(tags=["jobs"], parameters=[QUEUE_PARAMETER])
class QueueResumeView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_queue_resume",
        summary="Resume a paused queue",
        request=None,
        responses={200: QueueSerializer, 404: NOT_FOUND, **COMMON},
    )
    def post(self, request: Request, queue: str) -> Response:
        """Let workers take tasks from the queue again."""
        self.inspector().resume(queue)
        return Response(QueueSerializer(self.queue(queue)).data)


@extend_schema(tags=["jobs"], parameters=[QUEUE_PARAMETER])
class QueueDeadView(JobsAPIView):
    needs = {"delete": "delete"}

    @extend_schema(
        operation_id="jobs_queue_dead_destroy",
        summary="Delete every dead task of a queue",
        responses={200: CountSerializer, 404: NOT_FOUND, **COMMON},
    )
    def delete(self, request: Request, queue: str) -> Response:
        """Delete the queue's dead tasks (those dead when the request came in)."""
        count = self.inspector().delete_all_dead(queue)
        return Response(CountSerializer({"queue": queue, "count": count}).data)


@extend_schema(tags=["jobs"], parameters=[QUEUE_PARAMETER])
class QueueDeadRetryView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_queue_dead_retry",
        summary="Retry every dead task of a queue now",
        request=None,
        responses={200: CountSerializer, 404: NOT_FOUND, **COMMON},
    )
    def post(self, request: Request, queue: str) -> Response:
        """Move the queue's dead tasks (those dead when the request came in) to pending."""
        count = self.inspector().retry_all_dead(queue)
        return Response(CountSerializer({"queue": queue, "count": count}).data)
