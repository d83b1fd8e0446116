"""The jobs admin API's schedule endpoints: list them, one with its fire history, run one now,
pause and resume. Thin views over the Inspector, as in views.py (whose base maps the errors:
an unknown schedule is 404)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from django_jobs.api.serializers import (
    ErrorSerializer,
    FireSerializer,
    RunNowSerializer,
    ScheduleDetailSerializer,
    ScheduleListSerializer,
    ScheduleSerializer,
)
from django_jobs.api.views import COMMON, JobsAPIView

NAME_PARAMETER = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="A schedule's name (JOBS['SCHEDULE'], or a job class's name for its `schedule`).",
)
UNKNOWN = OpenApiResponse(ErrorSerializer, "No schedule of that name is configured.")


@extend_schema(tags=["schedules"])
class ScheduleListView(JobsAPIView):
    needs = {"get": "view"}

    @extend_schema(
        operation_id="jobs_schedules_list",
        summary="Every schedule",
        responses={200: ScheduleListSerializer, **COMMON},
    )
    def get(self, request: Request) -> Response:
        """Every configured schedule: its job, when it fires, its next and last fire, paused."""
        data = {"results": self.inspector().schedules()}
        return Response(ScheduleListSerializer(data).data)


@extend_schema(tags=["schedules"], parameters=[NAME_PARAMETER])
class ScheduleView(JobsAPIView):
    needs = {"get": "view"}

    @extend_schema(
        operation_id="jobs_schedule_retrieve",
        summary="One schedule with its fire history",
        responses={200: ScheduleDetailSerializer, 404: UNKNOWN, **COMMON},
    )
    def get(self, request: Request, name: str) -> Response:
        """One schedule, and its last fires (a bounded number), newest first."""
        inspector = self.inspector()
        info = ScheduleSerializer(inspector.schedule(name)).data
        fires = [FireSerializer(fire).data for fire in inspector.fire_history(name)]
        return Response({**info, "fires": fires})  # as ScheduleDetailSerializer describes it


@extend_schema(tags=["schedules"], parameters=[NAME_PARAMETER])
class ScheduleRunView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_schedule_run",
        summary="Run a schedule now",
        request=None,
        responses={200: RunNowSerializer, 404: UNKNOWN, **COMMON},
    )
    def post(self, request: Request, name: str) -> Response:
        """Enqueue one task of the schedule now; its next fire time still fires."""
        inspector = self.inspector()
        task_id = inspector.run_schedule_now(name)
        data = {"task_id": task_id, "schedule": inspector.schedule(name)}
        return Response(RunNowSerializer(data).data)


@extend_schema(tags=["schedules"], parameters=[NAME_PARAMETER])
class SchedulePauseView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_schedule_pause",
        summary="Pause a schedule",
        request=None,
        responses={200: ScheduleSerializer, 404: UNKNOWN, **COMMON},
    )
    def post(self, request: Request, name: str) -> Response:
        """Stop the schedule firing: its fire times pass without a task until resumed."""
        inspector = self.inspector()
        inspector.pause_schedule(name)
        return Response(ScheduleSerializer(inspector.schedule(name)).data)


@extend_schema(tags=["schedules"], parameters=[NAME_PARAMETER])
class ScheduleResumeView(JobsAPIView):
    needs = {"post": "change"}

    @extend_schema(
        operation_id="jobs_schedule_resume",
        summary="Resume a paused schedule",
        request=None,
        responses={200: ScheduleSerializer, 404: UNKNOWN, **COMMON},
    )
    def post(self, request: Request, name: str) -> Response:
        """Let the schedule fire again, from its next fire time."""
        inspector = self.inspector()
        inspector.resume_schedule(name)
        return Response(ScheduleSerializer(inspector.schedule(name)).data)
