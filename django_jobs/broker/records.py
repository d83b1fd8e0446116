"""Task records as the read side shows them: which fields a listing and a task's page read,
each cut to a length (read_fields.lua), and the TaskInfo built from them, a record that cannot
be decoded, one of another type and an id without a record included (broker/inspect.py reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django_jobs.broker.info import TaskInfo
from django_jobs.conf.redact import REDACTED
from django_jobs.message import NO_RECORD, SENSITIVE_MARK, DecodeError, Message, decode


def parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(value), UTC) if value else None
    except (ValueError, OverflowError, OSError):
        return None  # a corrupt field: show the task without that time rather than fail


def parse_int(value: str | bytes | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def decode_message(
    raw: bytes | None, task_id: str, queue: str
) -> tuple[Message | None, str | None]:
    """The decoded message of task `task_id` in `queue`, or None and why it cannot be decoded."""
    try:
        return decode(raw or b"", task_id, queue), None
    except DecodeError as exc:
        return None, str(exc)


#: The fields of a task record a listing reads (no traceback; the error as much as a row shows)
#: and a task's page reads, with the most bytes read of each: a longer value (a record written
#: by hand) is cut in Redis, so that no page moves more than a few hundred KB out of Redis. The
#: small fields are read in one HMGET, each large one measured first; the message's limit grows
#: with MAX_PAYLOAD_BYTES (InspectCalls._limit).
SMALL = ("state", "attempts", "crashes", "enqueued_at", "started_at", "next_at", "failed_at",
         "died_at", "completed_at", "cancel_requested_at", "canceled_at")  # fmt: skip
SMALL_LIMIT = 64
ROW: tuple[tuple[str, int], ...] = (("msg", 256 * 1024), ("error", 500))
FULL = (("msg", 256 * 1024), ("error", 64 * 1024), ("traceback", 256 * 1024))
#: Records read per script call: Redis runs a script whole, and other clients wait meanwhile.
READ_BATCH = 100


def fields_of(
    limits: Sequence[tuple[str, int]], row: list[Any]
) -> tuple[dict[str, str], dict[str, int], bytes]:
    """A record's fields as read_fields returned them (bytes, so that invalid UTF-8 cannot break
    a page), the full size of each one it cut, and the message as stored."""
    fields: dict[str, str] = {}
    cut: dict[str, int] = {}
    for (name, limit), size, value in zip(limits, row[::2], row[1::2], strict=True):
        if value:
            fields[name] = value.decode(errors="replace")
        if size > limit:
            cut[name] = size
    msg = row[2 * [name for name, _ in limits].index("msg") + 1]
    return fields, cut, msg


def task_info(
    queue: str,
    task_id: str,
    f: dict[str, str],
    listed: str,
    cut: dict[str, int] | None = None,
    msg: bytes = b"",
) -> TaskInfo:
    """Build a TaskInfo from a record's fields; a field cut says so at its end."""
    cut = cut or {}

    def text(name: str) -> str | None:
        value = f.get(name) or None
        if value is not None and name in cut:
            value += f" [... cut: {cut[name]:,} bytes in all]"
        return value

    if "msg" in cut:
        message = None
        problem: str | None = (
            f"its message is {cut['msg']:,} bytes, more than any task enqueued here can have "
            f"(written by hand?): only its start is shown"
        )
    else:
        message, problem = decode_message(msg, task_id, queue)
    raw = f.get("msg", "")
    # An undecodable record cannot say so for sure: one whose text says so is taken at its word.
    sensitive = message.sensitive if message else SENSITIVE_MARK in raw.replace(" ", "")
    return TaskInfo(
        id=task_id,
        queue=queue,
        state=f.get("state") or listed,
        job=message.job if message else None,
        payload=message.payload if message else None,
        attempts=parse_int(f.get("attempts")),
        crashes=parse_int(f.get("crashes")),
        max_attempts=message.max_attempts if message else None,
        idempotency_key=message.idempotency_key if message else None,
        enqueued_at=parse_time(f.get("enqueued_at")),
        started_at=parse_time(f.get("started_at")),
        next_at=parse_time(f.get("next_at")),
        failed_at=parse_time(f.get("failed_at")),
        died_at=parse_time(f.get("died_at")),
        completed_at=parse_time(f.get("completed_at")),
        cancel_requested_at=parse_time(f.get("cancel_requested_at")),
        canceled_at=parse_time(f.get("canceled_at")),
        error=text("error"),
        traceback=text("traceback"),
        decode_error=problem,
        raw=REDACTED if sensitive else raw,
        sensitive=sensitive,
    )


def orphan(queue: str, task_id: str, state: str) -> TaskInfo:
    """An id listed in `state` whose record is gone: shown as such (NO_RECORD), to be deleted."""
    info = task_info(queue, task_id, {"error": NO_RECORD}, state)
    return replace(info, decode_error=NO_RECORD)
