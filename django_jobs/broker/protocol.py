"""What the rest of django-jobs needs from a broker, and the values it passes around."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


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
    """The outcome of one enqueue: the task's state, or the id of the task already holding its
    idempotency key."""

    state: str
    duplicate_of: str | None = None


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One task to enqueue: its id, queue and encoded message, and when it is due."""

    id: str
    queue: str
    encoded: str
    delay: float = 0.0
    eta: float | None = None
    #: Redis key of the idempotency key, with the window in seconds, or None.
    idempotency_key: str | None = None
    idempotency_window: float = 0.0


class Broker(Protocol):
    """The state machine of DESIGN.md section 4; every method is one atomic transition."""

    def enqueue(self, requests: Sequence[EnqueueRequest]) -> list[Accepted]: ...

    def dequeue(self, queues: Sequence[str]) -> Delivery | None: ...

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

    def requeue(self, delivery: Delivery, *, crash: bool, reason: str = "") -> str | None: ...

    def forward(self, queue: str, limit: int = 1000) -> int: ...

    def extend_leases(self, queue: str, held: Sequence[tuple[str, str]]) -> list[str]: ...

    def recover(self, queue: str, limit: int = 1000) -> list[tuple[str, str]]: ...

    def janitor(self, queue: str, limit: int = 1000) -> int: ...
