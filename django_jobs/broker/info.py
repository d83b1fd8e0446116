"""What the broker's read side answers with (see inspect.py): queues, tasks and workers as
the admin, the API and the CLI show them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_jobs.conf.redact import key_matches
from django_jobs.keys import State

#: States held in a list (newest on the left); the others are sorted sets.
LISTS = frozenset({State.PENDING, State.ACTIVE})


def check_state(state: str) -> None:
    """Raise ValueError for a name that is not a task state."""
    if state not in State.ALL:
        raise ValueError(f"Unknown state {state!r}: use one of {', '.join(State.ALL)}.")


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue at a glance: tasks per state, paused flag, and today's counters (UTC day)."""

    name: str
    paused: bool
    scheduled: int
    pending: int
    active: int
    retry: int
    dead: int
    completed: int
    #: Tasks completed today.
    processed_today: int
    #: Failed runs today (each retry and each death counts one).
    failed_today: int
    #: Tasks canceled (kept for their retention, like completed ones).
    canceled: int = 0
    #: Tasks waiting for a slot of their job type's concurrency_limit (their records say
    #: pending; not in `pending`, which counts the pending list only).
    parked: int = 0

    @property
    def holds_tasks(self) -> bool:
        """Whether any task is in the queue, completed ones aside."""
        return bool(
            self.scheduled or self.pending or self.parked or self.active or self.retry or self.dead
        )

    def count(self, state: str) -> int:
        """Return the number of tasks in one state."""
        check_state(state)
        value: int = getattr(self, state)
        return value


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One task as stored; job, payload and max_attempts are None if it cannot be decoded."""

    id: str
    queue: str
    state: str
    job: str | None
    payload: dict[str, object] | None
    #: Runs that failed (reset when a dead task is retried).
    attempts: int
    #: Times a worker died under the task.
    crashes: int
    max_attempts: int | None
    idempotency_key: str | None
    enqueued_at: datetime | None
    started_at: datetime | None
    #: When a scheduled task is due, or a retry's next attempt.
    next_at: datetime | None
    failed_at: datetime | None
    died_at: datetime | None
    completed_at: datetime | None
    #: The last error, one line ("ValueError: ..."); kept when the task is retried.
    error: str | None
    traceback: str | None
    #: Why the record cannot be decoded, or None when it can.
    decode_error: str | None
    #: The encoded message as stored (invalid UTF-8 replaced), to show a corrupt record.
    raw: str
    #: Written by a `Job.sensitive` job type (or, undecodable, saying so): readers show its
    #: payload, idempotency key and raw message redacted (django_jobs.conf.redact.REDACTED).
    sensitive: bool = False
    #: When an operator asked to cancel it (a running task stops within a heartbeat).
    cancel_requested_at: datetime | None = None
    #: When it was canceled.
    canceled_at: datetime | None = None

    def key_matches(self, query: str) -> bool:
        """Whether a search for `query` finds the task by its idempotency key (see
        django_jobs.conf.redact.key_matches: a sensitive one's only whole)."""
        return key_matches(self.idempotency_key, query, self.sensitive)


@dataclass(frozen=True, slots=True)
class RunningTask:
    """A task a worker runs right now (as of its last heartbeat)."""

    id: str
    queue: str
    #: The job name, or None if the record is gone (finished since the beat) or undecodable.
    job: str | None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker as its last heartbeat described it."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: datetime | None
    last_beat: datetime | None
    #: One entry per busy slot; idle slots are concurrency - len(tasks).
    tasks: tuple[RunningTask, ...]


@dataclass(frozen=True, slots=True)
class Fire:
    """One enqueue by a schedule: a fire time's, or an operator's "run now"."""

    #: When it was enqueued (Redis time).
    fired_at: datetime
    #: The fire time it was for, or None for a "run now".
    fire_time: datetime | None
    task_id: str
    queue: str


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What Redis holds of one schedule: its last fire and paused flag."""

    #: The newest fire time handled (enqueued, or skipped), or None before the first.
    last_fire: float | None
    #: When the last enqueue happened (a fire time's or a "run now"), and its task.
    last_fired_at: float | None
    last_task_id: str | None
    last_task_queue: str | None
    paused: bool


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """One configured schedule as the admin and the API show it."""

    name: str
    #: The registered name of the job it enqueues.
    job: str
    #: The cron expression, or "every N seconds".
    expression: str
    #: The expression in words ("At 03:00 every day", "every 30 seconds").
    words: str
    timezone: str
    #: The next fire time (None while paused).
    next_fire_at: datetime | None
    #: When it last enqueued (a fire time's or a "run now"), and that task.
    last_fire_at: datetime | None
    last_task_id: str | None
    last_task_queue: str | None
    paused: bool
