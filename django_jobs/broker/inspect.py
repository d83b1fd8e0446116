"""The broker's read side and operator actions: what the Inspector asks of Redis.

As asynq keeps `inspect.go` beside `rdb.go`, the queries the admin, the API and the CLI need
live here, next to the scripts, and nothing outside `broker/` touches a Redis client. Each call
runs inside the unavailability handling (`writes=False` for reads), costs a fixed number of
round trips whatever the size of a queue, and answers with the dataclasses below. Nothing here
calls KEYS or SCAN.

A record that cannot be decoded is returned with `decode_error` set instead of failing a page,
and a record key of another type with what is wrong in `error`: the admin is where an operator
goes to find such a task and delete it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from django_jobs.broker.connection import ScriptCalls, wrong_key
from django_jobs.broker.info import (
    LISTS,
    QueueInfo,
    RunningTask,
    TaskInfo,
    WorkerInfo,
    check_state,
)
from django_jobs.broker.protocol import Deleted
from django_jobs.conf.redact import REDACTED
from django_jobs.keys import State, today, worker, workers
from django_jobs.message import NO_RECORD, SENSITIVE_MARK, DecodeError, Message, decode


def _time(value: str | None) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(value), UTC) if value else None
    except (ValueError, OverflowError, OSError):
        return None  # a corrupt field: show the task without that time rather than fail


def _int(value: str | bytes | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _message(raw: bytes | None) -> tuple[Message | None, str | None]:
    """The decoded message, or None and why it cannot be decoded."""
    try:
        return decode(raw or b""), None
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


def _fields(
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


def _task_info(
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
        message, problem = _message(msg)
    raw = f.get("msg", "")
    # An undecodable record cannot say so for sure: one whose text says so is taken at its word.
    sensitive = message.sensitive if message else SENSITIVE_MARK in raw.replace(" ", "")
    return TaskInfo(
        id=task_id,
        queue=queue,
        state=f.get("state") or listed,
        job=message.job if message else None,
        payload=message.payload if message else None,
        attempts=_int(f.get("attempts")),
        crashes=_int(f.get("crashes")),
        max_attempts=message.max_attempts if message else None,
        idempotency_key=message.idempotency_key if message else None,
        enqueued_at=_time(f.get("enqueued_at")),
        started_at=_time(f.get("started_at")),
        next_at=_time(f.get("next_at")),
        failed_at=_time(f.get("failed_at")),
        died_at=_time(f.get("died_at")),
        completed_at=_time(f.get("completed_at")),
        cancel_requested_at=_time(f.get("cancel_requested_at")),
        canceled_at=_time(f.get("canceled_at")),
        error=text("error"),
        traceback=text("traceback"),
        decode_error=problem,
        raw=REDACTED if sensitive else raw,
        sensitive=sensitive,
    )


def _running_tasks(value: str | None) -> list[tuple[str, str]]:
    """(id, queue) of each task in a heartbeat's task list, skipping malformed entries."""
    try:
        entries = json.loads(value or "[]")
    except ValueError:
        return []
    if not isinstance(entries, list):
        return []
    return [
        (str(e["id"]), str(e["queue"]))
        for e in entries
        if isinstance(e, dict) and e.get("id") and e.get("queue")
    ]


class InspectCalls(ScriptCalls):
    """The read side of one Redis broker, and the operator's actions on its tasks."""

    def _read(self, commands: Sequence[tuple[Any, ...]], *, errors: bool = True) -> list[Any]:
        """Run read commands in one round trip, replies as bytes; error replies as values
        (errors), else the first one raised as BrokerRefused."""
        pipe: Any = self.client.pipeline(transaction=False)  # Any: execute_command is untyped
        for command in commands:
            pipe.execute_command(*command, **{NEVER_DECODE: True})
        with self.unavailable(writes=False):
            replies: list[Any] = pipe.execute(raise_on_error=not errors) if commands else []
        return replies

    def queue_infos(self, names: Sequence[str]) -> list[QueueInfo]:
        """Every queue of names, in that order, with its depths and today's counters."""
        day = today()
        commands: list[tuple[Any, ...]] = []
        for name in names:
            k = self.keys(name)
            commands += [("ZCARD", k.scheduled), ("LLEN", k.pending), ("LLEN", k.active),
                         ("ZCARD", k.retry), ("ZCARD", k.dead), ("ZCARD", k.completed),
                         ("EXISTS", k.paused), ("GET", k.processed(day)),
                         ("GET", k.failed(day)), ("ZCARD", k.canceled)]  # fmt: skip
        replies = self._read(commands)
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, ResponseError):  # a structure of ours holding another type
                verb, key = command
                (kind,) = self._read([("TYPE", key)])
                expected = {"ZCARD": "sorted set", "LLEN": "list"}.get(verb, "string")
                raise wrong_key(key, bytes(kind).decode(errors="replace"), expected)
        infos = []
        for i, name in enumerate(names):
            row = replies[i * 10 : i * 10 + 10]  # ten replies per queue, in the order sent above
            scheduled, pending, active, retry, dead, completed, paused, processed, failed = row[:9]
            infos.append(
                QueueInfo(name, bool(paused), scheduled, pending, active, retry, dead, completed,
                          processed_today=_int(processed), failed_today=_int(failed),
                          canceled=row[9])
            )  # fmt: skip
        return infos

    def pending_count(self, queues: Sequence[str]) -> int:
        """How many tasks wait in the pending lists of queues, in one round trip."""
        with self.unavailable(writes=False):
            pipe = self.client.pipeline(transaction=False)
            for queue in queues:
                pipe.llen(self.keys(queue).pending)
            return sum(pipe.execute())

    def state_ids(
        self, queue: str, state: str, start: int, stop: int, *, newest_first: bool = True
    ) -> tuple[int, list[str]]:
        """How many tasks the state holds, and the ids at indexes start..stop of its order
        (latest first unless newest_first is False), in one round trip."""
        check_state(state)
        key = self.keys(queue).state(state)
        with self.unavailable(writes=False):
            pipe = self.client.pipeline(transaction=False)
            if state in LISTS and newest_first:
                pipe.llen(key)
                pipe.lrange(key, start, stop)
            elif state in LISTS:  # counted from the right end, the oldest, then reversed
                pipe.llen(key)
                pipe.lrange(key, -stop - 1, -start - 1)
            else:
                pipe.zcard(key)
                pipe.zrange(key, start, stop, desc=newest_first)
            total, ids = pipe.execute()
        if state in LISTS and not newest_first:
            ids.reverse()
        return total, ids

    def task_infos(self, queue: str, ids: Sequence[str], listed: str = "") -> list[TaskInfo | None]:
        """The tasks of ids in queue in full (each field cut to FULL's limits), in one round trip.

        `listed` is the state the ids were found in (a listing), for a record without one: an
        id whose record is gone is then listed with that state and nothing else (an orphan, so
        that it can be deleted); without `listed` it is None.
        """
        return self._infos(queue, ids, listed, FULL, budget=None)

    def task_rows(
        self, queue: str, ids: Sequence[str], listed: str, *, budget: int | None = None
    ) -> list[TaskInfo]:
        """The tasks of ids, found in state `listed` ("": those that exist), as a listing shows
        them (ROW: no traceback, the error cut), 100 a round trip; no more records once about
        `budget` bytes are read, so fewer than ids may come back (at least one)."""
        return [info for info in self._infos(queue, ids, listed, ROW, budget) if info is not None]

    def _infos(
        self,
        queue: str,
        ids: Sequence[str],
        listed: str,
        view: tuple[tuple[str, int], ...],
        budget: int | None,
    ) -> list[TaskInfo | None]:
        if not ids:
            return []
        k = self.keys(queue)
        large = [(name, self._limit(name, limit)) for name, limit in view]
        limits = [*((name, SMALL_LIMIT) for name in SMALL), *large]
        head = [SMALL_LIMIT, len(SMALL), *SMALL, *(x for pair in large for x in pair)]
        left = budget if budget is not None else 2**62
        reply: list[Any] = []
        for start in range(0, len(ids), READ_BATCH):
            if reply and left <= 0:
                break
            batch = [k.task(task_id) for task_id in ids[start : start + READ_BATCH]]
            rows = list(self._run_raw("read_fields", batch, [max(left, 0), *head], writes=False))
            reply += rows
            left -= sum(len(v) for row in rows if isinstance(row, list) for v in row[1::2])
            if len(rows) < len(batch):  # the script spent the budget
                break
        infos: list[TaskInfo | None] = []
        for task_id, row in zip(ids, reply, strict=False):  # fewer replies: the budget is spent
            if isinstance(row, bytes):
                # A record key holding something else (written by hand): list the task with
                # what is wrong instead of failing the whole page.
                error = (
                    f"its record {k.task(task_id)!r} is not a hash but a "
                    f"{row.decode(errors='replace')}: it is not one of ours (written by hand or "
                    f"by another program?). Deleting the task deletes that key."
                )
                infos.append(_task_info(queue, task_id, {"error": error}, listed))
            elif isinstance(row, list):
                fields, cut, msg = _fields(limits, row)
                infos.append(_task_info(queue, task_id, fields, listed, cut, msg))
            elif listed:  # no such key: an id listed without its record (an eviction?)
                info = _task_info(queue, task_id, {"error": NO_RECORD}, listed)
                infos.append(replace(info, decode_error=NO_RECORD))
            else:
                infos.append(None)
        return infos

    def _limit(self, name: str, limit: int) -> int:
        """The limit of a field; the message's follows the largest payload accepted."""
        if name == "msg":
            return max(limit, 2 * self.settings.max_payload_bytes + 4096)
        return limit

    def task_state(self, queue: str, task_id: str) -> str | None:
        """The state a task's record holds, or None when it is gone (or not a hash)."""
        (state,) = self._read([("HGET", self.keys(queue).task(task_id), "state")])
        if state is None or isinstance(state, ResponseError):
            return None
        return bytes(state).decode(errors="replace")

    def workers(self) -> list[WorkerInfo]:
        """The live workers (those whose heartbeat has not expired), in id order.

        Three round trips whatever the fleet: the registry, every worker's hash, then the job
        name of every running task.
        """
        namespace = self.settings.namespace
        with self.unavailable(writes=False):
            ids = sorted(str(i) for i in self.client.zrange(workers(namespace), 0, -1))
        replies = self._read([("HGETALL", worker(namespace, worker_id)) for worker_id in ids])
        # A worker that stopped beating keeps its registry entry until the next beat of any
        # worker drops it, but its hash has expired: it is not listed; nor is a key of another
        # type in its place (written by hand: no worker of ours).
        found = [
            (i, {k.decode(errors="replace"): v.decode(errors="replace") for k, v in h.items()})
            for i, h in zip(ids, replies, strict=True)
            if isinstance(h, dict) and h
        ]
        running = [_running_tasks(h.get("tasks")) for _, h in found]
        refs = [(q, t) for slots in running for (t, q) in slots]
        messages = self._read([("HGET", self.keys(q).task(t), "msg") for q, t in refs])
        jobs = {
            ref: None if isinstance(raw, ResponseError) else _message(raw)[0]
            for ref, raw in zip(refs, messages, strict=True)
        }
        return [
            WorkerInfo(
                id=worker_id,
                host=h.get("host", ""),
                pid=_int(h.get("pid")),
                queues=tuple(q for q in h.get("queues", "").split(",") if q),
                concurrency=_int(h.get("concurrency")),
                started_at=_time(h.get("started")),
                last_beat=_time(h.get("last_beat")),
                tasks=tuple(
                    RunningTask(t, q, message.job if (message := jobs.get((q, t))) else None)
                    for t, q in slots
                ),
            )
            for (worker_id, h), slots in zip(found, running, strict=True)
        ]

    # -- operator actions -------------------------------------------------------------------

    def run_now(self, queue: str, task_id: str, state: str) -> bool:
        """Move a scheduled, retry or dead task to pending now; False if it is not there."""
        if state not in (State.SCHEDULED, State.RETRY, State.DEAD):
            raise ValueError(f"only scheduled, retry and dead tasks can run now, not {state}")
        k = self.keys(queue)
        keys = [k.task(task_id), k.state(state), k.pending, k.wake]
        return bool(self._run("run_now", keys, [task_id, int(state == State.DEAD)]))

    def delete(self, queue: str, task_id: str, state: str, idempotency_key: str | None) -> Deleted:
        """Delete a task that is not running, seen in `state`, and release its idempotency key
        (its Redis key, or None) if it still points at this task."""
        k = self.keys(queue)
        keys = [k.task(task_id), k.state(state)]
        if idempotency_key:
            keys.append(idempotency_key)
        reply = self._run("delete", keys, [task_id, state])
        return {1: Deleted.DELETED, 0: Deleted.GONE}.get(reply) or Deleted(reply)

    def discard(self, queue: str, task_id: str) -> bool:
        """Delete a task whose record is broken (another type, gone, or without a state) and its
        id from every structure but active; False if the record is a task of ours (`delete`)."""
        k = self.keys(queue)
        structures = (k.scheduled, k.retry, k.dead, k.completed, k.canceled)
        return bool(self._run("discard", [k.task(task_id), k.pending, *structures], [task_id]))

    def pause(self, queue: str) -> None:
        """Stop workers from taking tasks from the queue; running tasks finish."""
        with self.unavailable():
            self.client.set(self.keys(queue).paused, "1")

    def resume(self, queue: str) -> None:
        """Let workers take tasks from a paused queue again."""
        with self.unavailable():
            self.client.delete(self.keys(queue).paused)
