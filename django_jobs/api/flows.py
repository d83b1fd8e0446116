"""The jobs admin API's flows endpoints: list runs, one run in full, cancel, send a signal.

Served under their own prefix (django_jobs.api.flow_urls, included at /api/v1/admin/flows), by
the same base view as the jobs endpoints (views.JobsAPIView: staff only, Task's permissions,
CSRF with session auth, Redis down = 503): reading needs view_task, cancel and signal
change_task. An unknown call id is 404; a cancel or signal the run no longer takes (it ended, a
signal of that name came first, its wait timed out) is 409 with the run's status.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.utils.urls import replace_query_param

from django_jobs.api.flow_serializers import (
    CancelSerializer,
    FlowConflictSerializer,
    FlowListQuerySerializer,
    RunDetailSerializer,
    RunPageSerializer,
    SignalRequestSerializer,
    SignalSentSerializer,
)
from django_jobs.api.serializers import VALIDATION_ERROR, ErrorSerializer
from django_jobs.api.views import COMMON, Conflict, JobsAPIView
from django_jobs.flows import cancel, list_runs, send_signal
from django_jobs.flows.base import CALL_ID_RE
from django_jobs.flows.details import RunDetail, get_run_detail

CALL_ID_PARAMETER = OpenApiParameter(
    "call_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=CALL_ID_RE.pattern,
    description="The run's call id (what Flow.start returned): 1 to 100 letters, digits, "
    "'_', '-' or '.'.",
)
UNKNOWN = OpenApiResponse(ErrorSerializer, "No run of that call id (or past its retention).")
BAD_REQUEST = OpenApiResponse(VALIDATION_ERROR, "A malformed call id, query or body.")
CONFLICT = OpenApiResponse(FlowConflictSerializer, "The run no longer takes this.")

F = TypeVar("F", bound=Callable[..., Any])


def change_schema(
    operation_id: str, summary: str, request: type[Serializer[Any]], ok: type[Serializer[Any]]
) -> Callable[[F], F]:
    """The schema of a POST that changes one run: its body, 200 with ok, 400, 404 and 409."""
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        request=request,
        responses={200: ok, 400: BAD_REQUEST, 404: UNKNOWN, 409: CONFLICT, **COMMON},
    )


def detail_data(detail: RunDetail) -> dict[str, Any]:
    """A run in full, as RunDetailSerializer describes it."""
    return {
        **dataclasses.asdict(detail.run),
        "signals": [dataclasses.asdict(s) for s in detail.signals],
        "parent_call_id": detail.parent,
        "children": list(detail.children),
    }


class FlowAPIView(JobsAPIView):
    def detail(self, call_id: str) -> RunDetail:
        """The run of call_id; 400 if the id is malformed, 404 if there is none."""
        if not CALL_ID_RE.match(call_id):
            raise ValidationError(
                {"call_id": ["A call id is 1 to 100 letters, digits, '_', '-' or '.'."]}
            )
        detail = get_run_detail(call_id)
        if detail is None:
            raise NotFound(f"No flow run {call_id} (never started, or past FLOW_RETENTION).")
        return detail


@extend_schema(tags=["flows"])
class FlowListView(FlowAPIView):
    needs = {"get": "view"}

    @extend_schema(
        operation_id="flows_list",
        summary="Flow runs, newest first",
        parameters=[FlowListQuerySerializer],
        responses={200: RunPageSerializer, 400: BAD_REQUEST, **COMMON},
    )
    def get(self, request: Request) -> Response:
        """Runs newest first, of one status and/or one flow, paged by number."""
        serializer = FlowListQuerySerializer(data=dict(request.query_params.items()))
        serializer.is_valid(raise_exception=True)
        query = serializer.validated_data
        page = list_runs(query.get("flow"), query.get("status"), page=query["page"],
                         per_page=query["per_page"])  # fmt: skip
        url = request.build_absolute_uri()
        data = {
            "page": page.page,
            "per_page": page.per_page,
            "next": replace_query_param(url, "page", page.page + 1) if page.has_next else None,
            "results": [dataclasses.asdict(run) for run in page.runs],
        }
        return Response(RunPageSerializer(data).data)


@extend_schema(tags=["flows"], parameters=[CALL_ID_PARAMETER])
class FlowView(FlowAPIView):
    needs = {"get": "view"}

    @extend_schema(
        operation_id="flows_retrieve",
        summary="One run in full",
        responses={200: RunDetailSerializer, 400: BAD_REQUEST, 404: UNKNOWN, **COMMON},
    )
    def get(self, request: Request, call_id: str) -> Response:
        """A run: status, input, metadata, output or error, steps, signals and links."""
        return Response(RunDetailSerializer(detail_data(self.detail(call_id))).data)


@extend_schema(tags=["flows"], parameters=[CALL_ID_PARAMETER])
class FlowCancelView(FlowAPIView):
    needs = {"post": "change"}

    @change_schema("flows_cancel", "Cancel a run", CancelSerializer, RunDetailSerializer)
    def post(self, request: Request, call_id: str) -> Response:
        """Cancel a run: a sleeping or waiting one ends now; a running one is asked to stop
        (its running step is interrupted), and the answer may still say running."""
        self.detail(call_id)
        body = CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason") or "canceled through the API"
        if not cancel(call_id, reason):
            status = self.detail(call_id).run.status
            raise Conflict(
                {"detail": f"Flow run {call_id} has ended ({status}).", "status": status}
            )
        return Response(RunDetailSerializer(detail_data(self.detail(call_id))).data)


@extend_schema(tags=["flows"], parameters=[CALL_ID_PARAMETER])
class FlowSignalView(FlowAPIView):
    needs = {"post": "change"}

    @change_schema(
        "flows_signal", "Send a signal to a run", SignalRequestSerializer, SignalSentSerializer
    )
    def post(self, request: Request, call_id: str) -> Response:
        """Deliver the signal `name` with `value`: the first of a name wins; one sent before
        the flow waits for it is kept for that wait."""
        self.detail(call_id)
        body = SignalRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        name, value = body.validated_data["name"], body.validated_data.get("value")
        if not send_signal(call_id, name, value, outbox=False):
            status = self.detail(call_id).run.status
            raise Conflict(
                {
                    "detail": f"Signal {name!r} was not taken: the run has ended, a signal of "
                    f"that name was delivered already, or its wait timed out.",
                    "status": status,
                }
            )
        detail = detail_data(self.detail(call_id))
        return Response(SignalSentSerializer({"taken": True, "run": detail}).data)
