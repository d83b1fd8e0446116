"""What the jobs admin API reads from query strings and writes as JSON.

Output serializers render the Inspector's dataclasses as they are (field names follow
DESIGN.md's state words), and describe them to drf-spectacular for the OpenAPI schema.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from django_jobs.api.listing import DEFAULT_PER_PAGE, MAX_PER_PAGE
from django_jobs.conf import get_settings
from django_jobs.conf.redact import REDACTED, redacted
from django_jobs.inspector import Fire, QueueInfo, RunningTask, ScheduleInfo, TaskInfo, WorkerInfo
from django_jobs.keys import State

# -- query strings --------------------------------------------------------------------------


class ListQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """Filters and paging of a list of tasks."""

    queue = serializers.ChoiceField(
        choices=[], required=False, help_text="Only this queue (default: every queue)."
    )
    job = serializers.CharField(
        required=False,
        max_length=200,
        help_text="Only tasks of this job (its registered name, exact match).",
    )
    per_page = serializers.IntegerField(
        default=DEFAULT_PER_PAGE,
        min_value=1,
        max_value=MAX_PER_PAGE,
        help_text="Most tasks in one page.",
    )
    cursor = serializers.CharField(
        required=False,
        max_length=1000,
        help_text="Where to go on from: the next_cursor of the previous page.",
    )
    order = serializers.ChoiceField(
        choices=["newest", "oldest"],
        default="newest",
        help_text="newest (default) or oldest first, by the state's time.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        queue = self.fields["queue"]
        assert isinstance(queue, serializers.ChoiceField)
        queue.choices = list(get_settings().known_queues)


class TaskListQuerySerializer(ListQuerySerializer):
    """A list of tasks in any state."""

    state = serializers.ChoiceField(choices=list(State.ALL), help_text="The tasks' state.")


# -- responses ------------------------------------------------------------------------------


class QueueSerializer(serializers.Serializer[QueueInfo]):
    """One queue: tasks per state, paused flag, and today's counters (UTC day)."""

    name = serializers.CharField()
    paused = serializers.BooleanField()
    scheduled = serializers.IntegerField()
    pending = serializers.IntegerField()
    parked = serializers.IntegerField(
        help_text="Pending tasks waiting for a slot of their job type's concurrency_limit "
        "(not counted in pending)."
    )
    active = serializers.IntegerField()
    retry = serializers.IntegerField()
    dead = serializers.IntegerField()
    completed = serializers.IntegerField()
    canceled = serializers.IntegerField()
    processed_today = serializers.IntegerField(help_text="Tasks completed today (UTC).")
    failed_today = serializers.IntegerField(
        help_text="Failed runs today (UTC); each retry and each death counts one."
    )


class RunningTaskSerializer(serializers.Serializer[RunningTask]):
    id = serializers.CharField()
    queue = serializers.CharField()
    job = serializers.CharField(
        allow_null=True, help_text="Null if the task finished since the beat, or is corrupt."
    )


class WorkerSerializer(serializers.Serializer[WorkerInfo]):
    """One live worker, as its last heartbeat described it."""

    id = serializers.CharField()
    host = serializers.CharField()
    pid = serializers.IntegerField()
    queues = serializers.ListField(child=serializers.CharField())
    concurrency = serializers.IntegerField()
    started_at = serializers.DateTimeField(allow_null=True)
    last_beat = serializers.DateTimeField(allow_null=True)
    tasks = RunningTaskSerializer(many=True, help_text="One entry per busy child process.")


class OutboxSerializer(serializers.Serializer[Any]):
    """The transactional outbox of the default database: jobs written, not yet sent to Redis."""

    rows = serializers.IntegerField(help_text="Jobs waiting in the outbox.")
    oldest_age = serializers.FloatField(
        allow_null=True, help_text="Seconds since the oldest row was written; null when empty."
    )
    held = serializers.IntegerField(
        help_text="Rows whose send failed (an unknown queue or job, Redis refusing them); "
        "they wait for a retry and hold up no other row."
    )
    held_error = serializers.CharField(help_text="Why the oldest held row was not sent ('').")
    relayed_at = serializers.DateTimeField(
        allow_null=True, help_text="When a worker relayed the outbox last; null: never."
    )
    relayed_by = serializers.CharField(help_text="Which worker that was ('' if none).")


class OverviewSerializer(serializers.Serializer[dict[str, Any]]):
    day = serializers.CharField(help_text="The UTC day of the *_today counters (YYYY-MM-DD).")
    queues = QueueSerializer(many=True, help_text="Every configured queue, in priority order.")
    workers = WorkerSerializer(many=True, help_text="Workers whose heartbeat has not expired.")
    outbox = OutboxSerializer(
        allow_null=True, help_text="The outbox; null when its table cannot be read (migrate)."
    )


class TaskSerializer(serializers.Serializer[TaskInfo]):
    """A task as listed: enough to decide what to do with it."""

    id = serializers.CharField()
    queue = serializers.CharField()
    state = serializers.CharField(
        help_text="scheduled, pending, active, retry, dead, completed or canceled ('' if the "
        "record has lost it)."
    )
    job = serializers.CharField(allow_null=True, help_text="Null if the record is corrupt.")
    attempts = serializers.IntegerField(help_text="Runs that failed.")
    crashes = serializers.IntegerField(help_text="Times a worker died under the task.")
    max_attempts = serializers.IntegerField(allow_null=True)
    enqueued_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    next_at = serializers.DateTimeField(
        allow_null=True, help_text="When a scheduled task is due, or a retry's next attempt."
    )
    failed_at = serializers.DateTimeField(allow_null=True)
    died_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was asked to cancel (a running task stops then)."
    )
    canceled_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_null=True, help_text="The last error, one line.")
    decode_error = serializers.CharField(
        allow_null=True, help_text="Why the record cannot be decoded; null when it can."
    )
    sensitive = serializers.BooleanField(
        help_text=f"Job.sensitive: its payload, idempotency key and raw record are {REDACTED!r}."
    )


class TaskDetailSerializer(TaskSerializer):
    """A task in full."""

    payload = serializers.JSONField(
        allow_null=True,
        help_text=f"An object of the payload's fields; {REDACTED!r} for a sensitive job's.",
    )
    idempotency_key = serializers.CharField(allow_null=True)
    traceback = serializers.CharField(allow_null=True)
    raw = serializers.CharField(help_text="The record as stored, to read a corrupt one.")

    def to_representation(self, instance: TaskInfo) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if instance.sensitive:
            data["payload"] = REDACTED
            data["idempotency_key"] = redacted(instance.idempotency_key, True)
        return data


class TaskPageSerializer(serializers.Serializer[dict[str, Any]]):
    total = serializers.IntegerField(
        help_text="Tasks in this state in the queues listed, before the job filter."
    )
    scanned = serializers.IntegerField(help_text="Task records read to answer.")
    next = serializers.URLField(
        allow_null=True, help_text="The next page; null when everything was read."
    )
    next_cursor = serializers.CharField(allow_null=True)
    results = TaskSerializer(many=True)


class CountSerializer(serializers.Serializer[dict[str, Any]]):
    queue = serializers.CharField()
    count = serializers.IntegerField(help_text="Tasks retried or deleted.")


class ScheduleSerializer(serializers.Serializer[ScheduleInfo]):
    """One configured schedule: what it runs, when, and its last fire."""

    name = serializers.CharField()
    job = serializers.CharField(help_text="The registered name of the job it enqueues.")
    expression = serializers.CharField(help_text="The cron expression, or every N seconds.")
    words = serializers.CharField(help_text="The expression in words.")
    timezone = serializers.CharField(help_text="The time zone its cron expression is read in.")
    next_fire_at = serializers.DateTimeField(
        allow_null=True, help_text="The next fire time; null while paused."
    )
    last_fire_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When it last enqueued (a fire time's or a run now); null before its first.",
    )
    last_task_id = serializers.CharField(allow_null=True, help_text="The task it last enqueued.")
    last_task_queue = serializers.CharField(allow_null=True)
    paused = serializers.BooleanField()


class FireSerializer(serializers.Serializer[Fire]):
    """One enqueue by a schedule."""

    fired_at = serializers.DateTimeField(help_text="When it was enqueued.")
    fire_time = serializers.DateTimeField(
        allow_null=True, help_text="The fire time it was for; null for a run now."
    )
    task_id = serializers.CharField()
    queue = serializers.CharField()


class ScheduleDetailSerializer(ScheduleSerializer):
    """A schedule with its fire history."""

    fires = FireSerializer(many=True, help_text="Its last fires (a bounded number), newest first.")


class ScheduleListSerializer(serializers.Serializer[dict[str, Any]]):
    results = ScheduleSerializer(many=True, help_text="Every configured schedule, by name.")


class RunNowSerializer(serializers.Serializer[dict[str, Any]]):
    task_id = serializers.CharField(help_text="The task enqueued now.")
    schedule = ScheduleSerializer()


# -- errors ---------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField()


class ConflictSerializer(ErrorSerializer):
    state = serializers.CharField(help_text="The state the task is in.")


class UnavailableSerializer(ErrorSerializer):
    code = serializers.ChoiceField(
        choices=["jobs_disabled", "broker_unavailable"],
        help_text="jobs_disabled: JOBS['REDIS_URL'] is not set; broker_unavailable: Redis "
        "did not answer.",
    )


#: The body of a 400: each parameter at fault with its messages.
VALIDATION_ERROR = {
    "type": "object",
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}
