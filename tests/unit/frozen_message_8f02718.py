"""A frozen copy of the record format of the release before record version 3 (commit 8f02718,
django_jobs/message.py): its Message, encode and decode, verbatim, so that a test can check that
what this release writes is read by a worker of that release during a rolling deploy
(tests/unit/test_message_format.py). Never edit it to match the code: it is the old release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: The record version this release writes (`v` in the message). Records of earlier releases
#: must stay readable: tests/integration/test_upgrades.py reads a fixture of version 1.
#: Version 2 adds `trace` and `sensitive`; a record with neither is still written as version 1,
#: so that a worker of an earlier release reads it (a traced or sensitive one it refuses, saying
#: to run one release).
VERSION = 2
READS = (1, 2)


class DecodeError(ValueError):
    """(8f02718's is also a JobsError.)"""


@dataclass(frozen=True, slots=True)
class Message:
    """The immutable part of a task: who runs it, with what, under which limits."""

    id: str
    job: str
    queue: str
    payload: dict[str, Any]
    max_attempts: int
    timeout: float
    retention: float
    idempotency_key: str | None = None
    #: The enqueue's trace context (W3C traceparent/tracestate), when tracing is on.
    trace: dict[str, str] | None = None
    #: The job type's `Job.sensitive` at enqueue: readers (admin, API, CLI, logs) show its
    #: payload and idempotency key redacted, even when the job type is unknown to them.
    sensitive: bool = False


def encode(message: Message) -> str:
    """Encode a message as compact JSON."""
    m = message
    body = {"v": VERSION if m.trace or m.sensitive else 1, "id": m.id, "job": m.job,
            "queue": m.queue, "payload": m.payload, "max_attempts": m.max_attempts,
            "timeout": m.timeout, "retention": m.retention,
            "idempotency_key": m.idempotency_key}  # fmt: skip
    if m.trace:
        body["trace"] = m.trace
    if m.sensitive:
        body["sensitive"] = True
    return _dumps(body)


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def decode(raw: str | bytes) -> Message:
    """Decode a message, raising DecodeError with the reason if it is corrupt."""
    if not raw:
        raise DecodeError("the task record is missing or has no message (written by hand?)")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"the task record is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise DecodeError(f"the task record is a JSON {type(body).__name__}, not an object")
    version = body.pop("v", None)
    if version not in READS:
        raise DecodeError(
            f"the task record has version {version!r}; this worker reads 1 to {VERSION}: "
            f"run the same django-jobs release on every worker"
        )
    try:
        message = Message(**body)
    except TypeError as exc:
        raise DecodeError(f"the task record does not have the expected fields: {exc}") from exc
    problems = [name for name, ok in _field_checks(message) if not ok]
    if problems:
        raise DecodeError(f"the task record has fields of the wrong type: {', '.join(problems)}")
    return message


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _field_checks(m: Message) -> list[tuple[str, bool]]:
    return [
        ("id", isinstance(m.id, str)),
        ("job", isinstance(m.job, str)),
        ("queue", isinstance(m.queue, str)),
        ("payload", isinstance(m.payload, dict)),
        ("max_attempts", isinstance(m.max_attempts, int) and not isinstance(m.max_attempts, bool)),
        ("timeout", _number(m.timeout) and m.timeout > 0),
        ("retention", _number(m.retention) and m.retention >= 0),
        ("idempotency_key", m.idempotency_key is None or isinstance(m.idempotency_key, str)),
        ("trace", m.trace is None or (isinstance(m.trace, dict)
                                      and all(isinstance(v, str) for v in m.trace.values()))),
        ("sensitive", isinstance(m.sensitive, bool)),
    ]  # fmt: skip
