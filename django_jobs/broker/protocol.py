"""What the rest of django-jobs needs from a broker, and the values it passes around.

`Broker` is the boundary: every operation the worker, the client and the inspector use, each one
atomic transition or one bounded read, each raising BrokerUnavailable or BrokerRefused (never a
redis-py error). `RedisBroker` (redis.py, with the read side in inspect.py) is the one
implementation; callers are typed against `Broker`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from django_jobs.broker.info import Fire, QueueInfo, ScheduleState, TaskInfo, WorkerInfo
from django_jobs.conf import JobsSettings
from django_jobs.keys import QueueKeys


@dataclass(frozen=True, slots=True)
class Delivery:
    """A task handed to one consumer by `dequeue`; its outcome may be written only with `epoch`."""

    id: str
    queue: str
    #: The encoded message as stored, b"" when the record is missing or has no message.
    raw: bytes
    #: Runs that failed before this one.
    attempts: int
    #: Times a worker died under this task before this run.
    crashes: int
    epoch: str
    enqueued_at: float | None
    #: When a worker first found the job type unknown (rolling deploys), else None.
    first_unknown_at: float | None
    #: Lease deadline, Redis time in epoch seconds.
    lease_deadline: float
    #: Why this task's record cannot be used as it is ("enqueued_at is not a number: 'abc'"),
    #: or "": the processor kills a delivery with a problem, without spending an attempt.
    problem: str = ""


class Action(StrEnum):
    """What a verdict writes; the values are the names of the scripts that write them."""

    ACK = "ack"
    RETRY = "retry"
    KILL = "kill"
    #: A run asked to cancel stopped: the task is canceled (broker/cancel.py).
    CANCEL = "end_canceled"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to write for a finished run (ack, retry or kill), under the run's epoch.

    The worker's outcome policy decides it; whoever ran the task writes it.
    """

    task_id: str
    queue: str
    epoch: str
    job: str
    action: Action
    #: ack: seconds to keep the completed task.
    retention: float = 0.0
    #: retry: seconds until the next run.
    delay: float = 0.0
    error: str = ""
    traceback: str = ""
    #: retry/kill: whether the run spent an attempt (not for corrupt records or unknown jobs).
    spend: bool = True
    #: retry: the job type is unknown here (bounce).
    unknown: bool = False
    #: For the log line: which run this was, of how many, and how long it took.
    attempt: int = 0
    max_attempts: int = 0
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class Accepted:
    """The outcome of one enqueue: the task's state, or the id (and queue) of the task already
    holding its idempotency key."""

    state: str
    duplicate_of: str | None = None
    duplicate_queue: str | None = None


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One task to enqueue: its id, queue and encoded message, and when it is due."""

    id: str
    queue: str
    encoded: str
    delay: float = 0.0
    eta: float | None = None
    #: Redis key of the idempotency key, with the window in seconds, or None. It is in the slot
    #: of the job type's home queue (`Job.idempotency_queue()`), whatever this task's queue: see
    #: broker/handoff.py.
    idempotency_key: str | None = None
    idempotency_window: float = 0.0


class Requeued(StrEnum):
    """Where requeue or recover put a task back: pending, or dead past the crash budget, or
    canceled when an operator had asked to cancel its run (it does not run again)."""

    PENDING = "pending"
    DEAD = "dead"
    CANCELED = "canceled"


class Deleted(StrEnum):
    """What an operator's delete of one task did (the replies of delete.lua)."""

    #: Deleted (or an orphan id without a record cleaned up).
    DELETED = "deleted"
    #: There was nothing to delete.
    GONE = "gone"
    #: The task is running: not deleted.
    RUNNING = "active"
    #: Its state is no longer the one the caller saw: read it again.
    MOVED = "moved"


class CancelOutcome(StrEnum):
    """What a cancel did (`django_jobs.cancel`, the admin, the API, the CLI)."""

    #: The task was waiting (pending, scheduled, retry): it is canceled, and never runs.
    CANCELED = "canceled"
    #: The task is running: it was asked to stop (JobCanceled raised in its handler within a
    #: heartbeat), and ends canceled.
    REQUESTED = "requested"
    #: The task had ended already (completed, dead, canceled): nothing changed.
    FINISHED = "finished"
    #: No such task: never enqueued here, deleted, or expired after its retention.
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A cancel's outcome, and the state the task was in when it came ("" when not found)."""

    outcome: CancelOutcome
    state: str


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a lease renewal found: the runs (id, epoch) whose lease is lost, and the runs
    renewed whose task an operator asked to cancel."""

    lost: list[tuple[str, str]]
    canceled: list[tuple[str, str]]


class Broker(Protocol):
    """The state machine of DESIGN.md section 4: every operation the rest of django-jobs uses."""

    settings: JobsSettings
    #: The broker's URL with its password hidden: the one form of it that reaches text.
    url: str

    def keys(self, queue: str) -> QueueKeys: ...

    # -- enqueue and consume (client, worker) ----------------------------------------------

    def enqueue(self, requests: Sequence[EnqueueRequest]) -> list[Accepted]: ...

    def dequeue(self, queues: Sequence[str]) -> Delivery | None: ...

    def dequeue_many(self, queues: Sequence[str], count: int) -> list[Delivery]: ...

    def settle(
        self, verdicts: Sequence[Verdict], queues: Sequence[str], count: int
    ) -> tuple[list[bool], list[Delivery]]: ...

    def write(self, verdict: Verdict) -> bool: ...

    def wait_and_fetch(self, queues: Sequence[str], timeout: float) -> list[Delivery]: ...

    def interrupt_wait(self) -> None: ...

    def ack(self, delivery: Delivery, retention: float) -> bool: ...

    def retry(
        self,
        delivery: Delivery,
        delay: float,
        error: str,
        traceback: str,
        *,
        spend: bool = True,
        unknown: bool = False,
    ) -> bool: ...

    def kill(
        self, delivery: Delivery, error: str, traceback: str, *, spend: bool = True
    ) -> bool: ...

    def requeue(self, delivery: Delivery, *, crash: bool, reason: str = "") -> Requeued | None: ...

    # -- background loops (worker) ----------------------------------------------------------

    def forward(self, queue: str, limit: int = 1000) -> int: ...

    def extend_leases(
        self, queue: str, held: Sequence[tuple[str, str]]
    ) -> list[tuple[str, str]]: ...

    def renew_leases(self, queue: str, held: Sequence[tuple[str, str]]) -> Renewal: ...

    def end_canceled(self, delivery: Delivery, error: str, traceback: str) -> bool: ...

    def recover(self, queue: str, limit: int = 1000) -> list[tuple[str, Requeued]]: ...

    def janitor(self, queue: str, limit: int = 1000) -> int: ...

    def finish_handoffs(self, home: str, grace: float | None = None, limit: int = ...) -> int: ...

    def beat(self, worker_id: str, info: dict[str, str | int | float], ttl: float) -> None: ...

    def unregister(self, worker_id: str) -> None: ...

    def pending_count(self, queues: Sequence[str]) -> int: ...

    # -- read side and operator actions (inspector, JobHandle) ------------------------------

    def queue_infos(self, names: Sequence[str]) -> list[QueueInfo]: ...

    def state_ids(
        self, queue: str, state: str, start: int, stop: int, *, newest_first: bool = True
    ) -> tuple[int, list[str]]: ...

    def task_infos(
        self, queue: str, ids: Sequence[str], listed: str = ""
    ) -> list[TaskInfo | None]: ...

    def task_rows(
        self, queue: str, ids: Sequence[str], listed: str, *, budget: int | None = None
    ) -> list[TaskInfo]: ...

    def task_matches(
        self,
        queue: str,
        ids: Sequence[str],
        listed: str,
        *,
        job: str | None = None,
        text: str = "",
        budget: int | None = None,
    ) -> list[TaskInfo | None]: ...

    def task_state(self, queue: str, task_id: str) -> str | None: ...

    def workers(self) -> list[WorkerInfo]: ...

    def run_now(self, queue: str, task_id: str, state: str) -> bool: ...

    def discard(self, queue: str, task_id: str) -> bool: ...

    def delete(
        self, queue: str, task_id: str, state: str, idempotency_key: str | None
    ) -> Deleted: ...

    def release_key(self, key: str, task_id: str, queue: str) -> bool: ...

    def cancel(self, queue: str, task_id: str) -> Cancellation: ...

    def pause(self, queue: str) -> None: ...

    def resume(self, queue: str) -> None: ...

    # -- schedules (the worker's scheduler, the inspector) ----------------------------------

    def time(self) -> float:
        """Redis' clock, in epoch seconds: the one clock every worker's scheduler agrees on."""
        ...

    def fire(
        self, schedule: str, request: EnqueueRequest, fire_time: float | None, history: int
    ) -> Accepted | None:
        """Enqueue a schedule's task (its idempotency key set in the same script) and record
        the fire (last task, and history bounded to `history`). With a fire time: None (nothing
        written) if the schedule's last fire is at or past it, else it becomes the last fire.
        With None (a "run now"): always enqueued, the last fire time unchanged."""
        ...

    def skip_fire(self, schedule: str, fire_time: float) -> bool:
        """Make `fire_time` the schedule's last fire without enqueueing (a skipped or missed
        fire time); False if the last fire was already at or past it."""
        ...

    def schedule_states(self, names: Sequence[str]) -> dict[str, ScheduleState]:
        """The state of each schedule of names (one round trip)."""
        ...

    def fire_history(self, schedule: str, limit: int) -> list[Fire]:
        """The schedule's last `limit` fires, newest first."""
        ...

    def pause_schedule(self, schedule: str) -> None: ...

    def resume_schedule(self, schedule: str) -> None: ...

    def forget_schedules(self, keep: Sequence[str]) -> list[str]:
        """Delete the state of every schedule not in `keep` and register those in it; return
        the names forgotten."""
        ...
