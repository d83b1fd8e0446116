"""What the runs of a Django task (`django_jobs.tasks`) leave behind, beside its task record.

Per task, the hash `<namespace>:{<queue>}:dt:<id>` (the task record's hash tag, so one
MULTI/EXEC of it stays on one Redis Cluster slot): the function's arguments as enqueued
(`payload`), `started_at` (first run), `last_attempted_at`, `w:<n>` (the worker of attempt n),
`e:<n>` (attempt n's error: the exception class path and the traceback, as JSON), and once the
function has returned or failed for good, `outcome`, `finished_at` and `return` (the return
value as JSON). Each write is one transaction that also sets the hash's time to live: the
task's retention after its last write, a day longer while it may still run again.

A rerun of the same attempt (its worker died under it: no attempt is spent) overwrites that
attempt's worker and clears an outcome a lost acknowledgement left: writes are safe to repeat.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django_jobs.broker.redis import RedisBroker

#: Extra seconds the runs' data lives while the task may still run (a retry, a backlog).
PENDING_TTL = 86400.0


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One failed attempt: the exception's class path and its traceback."""

    exception_class_path: str
    traceback: str


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What the runs of one task have recorded so far."""

    payload: str = ""
    started_at: float | None = None
    last_attempted_at: float | None = None
    #: The worker id of each attempt, oldest first.
    worker_ids: list[str] = field(default_factory=list)
    #: (attempt number, error) of each failed attempt, oldest first.
    errors: list[tuple[int, AttemptError]] = field(default_factory=list)
    #: "SUCCESSFUL" or "FAILED" once the function returned or failed for good, else "".
    outcome: str = ""
    finished_at: float | None = None
    #: The return value as JSON text ("" when there is none).
    return_json: str = ""


def key(broker: RedisBroker, queue: str, task_id: str) -> str:
    """The hash of one task's runs."""
    return f"{broker.keys(queue).prefix}:dt:{task_id}"


def _ttl(seconds: float) -> int:
    return max(1, round(seconds))


def start(
    broker: RedisBroker,
    queue: str,
    task_id: str,
    *,
    attempt: int,
    worker_id: str,
    now: float,
    payload: str,
    retention: float,
) -> RunRecord:
    """Record that attempt `attempt` starts now on `worker_id`; return every run's record,
    this one included (one round trip, one transaction)."""
    name = key(broker, queue, task_id)
    with broker.unavailable():
        pipe = broker.client.pipeline(transaction=True)
        pipe.hsetnx(name, "started_at", repr(now))
        pipe.hset(name, mapping={"last_attempted_at": repr(now), f"w:{attempt}": worker_id,
                                 "payload": payload})  # fmt: skip
        pipe.hdel(name, "outcome", "finished_at", "return", f"e:{attempt}", *_later(attempt))
        pipe.expire(name, _ttl(retention + PENDING_TTL))
        pipe.hgetall(name)
        replies = pipe.execute()
    return _record(replies[-1])


def _later(attempt: int) -> list[str]:
    """Fields of attempts after this one, left by an earlier history (an operator retried the
    dead task, which resets its attempts): this attempt's error and every later one go."""
    return [f"{kind}:{n}" for n in range(attempt + 1, attempt + 33) for kind in "we"]


def fail(
    broker: RedisBroker,
    queue: str,
    task_id: str,
    *,
    attempt: int,
    error: AttemptError,
    now: float,
    final: bool,
    retention: float,
) -> None:
    """Record attempt `attempt`'s error; with `final`, the task has failed for good."""
    name = key(broker, queue, task_id)
    body = json.dumps({"class": error.exception_class_path, "traceback": error.traceback})
    fields: dict[Any, Any] = {f"e:{attempt}": body}
    if final:
        fields |= {"outcome": "FAILED", "finished_at": repr(now)}
    with broker.unavailable():
        pipe = broker.client.pipeline(transaction=True)
        pipe.hset(name, mapping=fields)
        pipe.expire(name, _ttl(retention if final else retention + PENDING_TTL))
        pipe.execute()


def succeed(
    broker: RedisBroker, queue: str, task_id: str, *, return_json: str, now: float, retention: float
) -> None:
    """Record that the function returned (its value as JSON text)."""
    name = key(broker, queue, task_id)
    fields: dict[Any, Any] = {
        "outcome": "SUCCESSFUL",
        "finished_at": repr(now),
        "return": return_json,
    }
    with broker.unavailable():
        pipe = broker.client.pipeline(transaction=True)
        pipe.hset(name, mapping=fields)
        pipe.expire(name, _ttl(retention))
        pipe.execute()


def locate(broker: RedisBroker, queues: Sequence[str], task_id: str) -> str | None:
    """The queue whose task record or runs' hash has this id, or None (one round trip)."""
    with broker.unavailable(writes=False):
        pipe = broker.client.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(broker.keys(queue).task(task_id), key(broker, queue, task_id))
        found = pipe.execute()
    return next((queue for queue, count in zip(queues, found, strict=True) if count), None)


def read(broker: RedisBroker, queue: str, task_id: str) -> RunRecord:
    """What the runs of one task recorded (an empty record before its first run)."""
    with broker.unavailable(writes=False):
        raw = broker.client.hgetall(key(broker, queue, task_id))
    return _record(raw)


def _float(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None  # written by hand: read as absent


def _str(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _numbered(fields: dict[str, str], kind: str) -> list[tuple[int, str]]:
    found = []
    for name, value in fields.items():
        prefix, _, number = name.partition(":")
        if prefix == kind and number.isdigit():
            found.append((int(number), value))
    return sorted(found)


def _record(raw: dict[Any, Any]) -> RunRecord:
    fields = {_str(name): _str(value) for name, value in raw.items()}
    errors = []
    for number, value in _numbered(fields, "e"):
        try:
            body = json.loads(value)
            error = AttemptError(str(body["class"]), str(body["traceback"]))
        except (ValueError, KeyError, TypeError):
            error = AttemptError("builtins.Exception", value)
        errors.append((number, error))
    return RunRecord(
        payload=fields.get("payload", ""),
        started_at=_float(fields.get("started_at")),
        last_attempted_at=_float(fields.get("last_attempted_at")),
        worker_ids=[value for _, value in _numbered(fields, "w")],
        errors=errors,
        outcome=fields.get("outcome", ""),
        finished_at=_float(fields.get("finished_at")),
        return_json=fields.get("return", ""),
    )
