"""What the flows endpoints of the jobs admin API read and write as JSON (api/flows.py).

They render django_jobs.flows' dataclasses (Run, StepInfo, and details.Signal) as they are, and
describe them to drf-spectacular for the OpenAPI schema.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from django_jobs.api.listing import DEFAULT_PER_PAGE, MAX_PER_PAGE
from django_jobs.flows import STATUSES, StepInfo
from django_jobs.flows.details import Signal

STATUS_HELP = "running, sleeping, waiting, succeeded, failed or canceled."


class FlowListQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """Filters and paging of the list of runs."""

    status = serializers.ChoiceField(
        choices=list(STATUSES), required=False, help_text=f"Only runs in this status: {STATUS_HELP}"
    )
    flow = serializers.CharField(
        required=False, max_length=200, help_text="Only runs of this flow (its registered name)."
    )
    page = serializers.IntegerField(default=1, min_value=1, max_value=10_000)
    per_page = serializers.IntegerField(
        default=DEFAULT_PER_PAGE,
        min_value=1,
        max_value=MAX_PER_PAGE,
        help_text="Most runs in one page.",
    )


class StepSerializer(serializers.Serializer[StepInfo]):
    """One step (or sleep, wait, parallel, item of a parallel) of a run."""

    name = serializers.CharField()
    kind = serializers.CharField(help_text="step, sleep, wait, parallel or item.")
    state = serializers.CharField()
    attempts = serializers.IntegerField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    next_at = serializers.DateTimeField(
        allow_null=True, help_text="A sleep's wake time, a wait's deadline or a retry's next run."
    )


class RunSerializer(serializers.Serializer[Any]):
    """A run as listed (a flows.Run, or its fields in a dict)."""

    call_id = serializers.CharField()
    flow = serializers.CharField(help_text="The flow's registered name.")
    status = serializers.CharField(help_text=STATUS_HELP)
    error = serializers.CharField(allow_blank=True, help_text="Why it failed or was canceled.")
    created_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class SignalSerializer(serializers.Serializer[Signal]):
    name = serializers.CharField()
    value = serializers.JSONField(allow_null=True, help_text="The value sent (JSON).")


class RunDetailSerializer(RunSerializer):
    """A run in full: its input, metadata, output, steps in the order they started, signals
    and links."""

    input = serializers.DictField()
    metadata = serializers.DictField()
    output = serializers.JSONField(allow_null=True, help_text="The output once succeeded.")
    version = serializers.IntegerField(
        help_text="The version of the flow's code the run was started under (Flow.version)."
    )
    steps = StepSerializer(many=True)
    signals = SignalSerializer(many=True, help_text="The signals delivered to the run.")
    parent_call_id = serializers.CharField(
        allow_blank=True, help_text="The call id of the parent run ('' for a top-level run)."
    )
    children = serializers.ListField(
        child=serializers.CharField(), help_text="The call ids of its child runs."
    )


class RunPageSerializer(serializers.Serializer[dict[str, Any]]):
    page = serializers.IntegerField()
    per_page = serializers.IntegerField()
    next = serializers.URLField(allow_null=True, help_text="The next page; null on the last.")
    results = RunSerializer(many=True, help_text="Newest first.")


class CancelSerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=500, help_text="Kept as the run's error."
    )


class SignalRequestSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=200, help_text="The signal the flow waits for.")
    value = serializers.JSONField(
        required=False, allow_null=True, help_text="Any JSON value (default null)."
    )


class FlowConflictSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField()
    status = serializers.CharField(help_text=f"The run's status: {STATUS_HELP}")


class SignalSentSerializer(serializers.Serializer[dict[str, Any]]):
    taken = serializers.BooleanField(help_text="Always true: a signal not taken is a 409.")
    run = RunDetailSerializer()
