"""What a backend is given and what it answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from django_jobs.broker.protocol import Accepted
from django_jobs.message import Message

if TYPE_CHECKING:
    from django_jobs.jobs import Job


@dataclass(frozen=True, slots=True)
class Submission:
    """One enqueue, validated and encoded, with every default applied."""

    job: type[Job[Any]]
    message: Message
    #: The message as it is stored (`message.encode`), already checked against the size limit.
    encoded: str
    #: Seconds until due (0: at once), unless `eta` (epoch seconds) is given.
    delay: float
    eta: float | None
    #: Seconds the idempotency key (message.idempotency_key) refuses duplicates.
    idempotency_window: float


class Backend(Protocol):
    """Takes submissions somewhere: Redis, an inline run, nowhere, a test's capture."""

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        """Take every submission; answer one Accepted each, in order (duplicate_of set for an
        idempotency key already taken: that one was not taken)."""
        ...
