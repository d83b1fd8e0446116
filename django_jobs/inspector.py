"""The one read/mutate API over the broker: the admin, the REST API and the CLI all use it.

Reads cost a fixed number of round trips whatever the size of a queue: the depths of every queue
in one pipeline, a page of tasks in two (ids by index, then their records). Changes go through
the broker's scripts, so an operator's action is one atomic transition like any other. As in
asynq's inspector, nothing here calls KEYS or SCAN.

A record that cannot be decoded is listed with `decode_error` set instead of breaking a page:
the admin is where an operator goes to find such a task and delete it.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from django_jobs import keys
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.exceptions import UnknownQueue
from django_jobs.keys import QueueKeys, State, today
from django_jobs.message import DecodeError, Message, decode

#: Dead tasks read and handled per round by retry_all_dead and delete_all_dead.
BATCH_SIZE = 500
#: The largest page `tasks` serves.
MAX_PER_PAGE = 1000

#: States held in a list (newest on the left); the others are sorted sets.
LISTS = frozenset({State.PENDING, State.ACTIVE})
#: States from which "retry now" moves a task to pending.
RUNNABLE = frozenset({State.SCHEDULED, State.RETRY, State.DEAD})


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

    def count(self, state: str) -> int:
        """Return the number of tasks in one state."""
        _check_state(state)
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


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of the tasks in a state; `total` counts the whole state."""

    items: tuple[TaskInfo, ...]
    total: int
    page: int
    per_page: int
    has_next: bool


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


def _check_state(state: str) -> None:
    if state not in State.ALL:
        raise ValueError(f"Unknown state {state!r}: use one of {', '.join(State.ALL)}.")


def _running(task_id: str) -> ValueError:
    return ValueError(
        f"Task {task_id} is running (active) and cannot be deleted; wait until it finishes, "
        f"then delete it."
    )


def _time(value: str | None) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(value), UTC) if value else None
    except (ValueError, OverflowError, OSError):
        return None  # a corrupt field: show the task without that time rather than fail


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _task_info(queue: str, task_id: str, record: dict[bytes, bytes], listed: str) -> TaskInfo:
    """Build a TaskInfo from a raw record (bytes, so that invalid UTF-8 cannot break a page)."""
    raw = record.get(b"msg", b"")
    f = {
        key.decode(errors="replace"): value.decode(errors="replace")
        for key, value in record.items()
    }
    message: Message | None = None
    problem: str | None = None
    try:
        message = decode(raw)
    except DecodeError as exc:
        problem = str(exc)
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
        error=f.get("error") or None,
        traceback=f.get("traceback") or None,
        decode_error=problem,
        raw=f.get("msg", ""),
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


def _job_name(raw: bytes | None) -> str | None:
    try:
        return decode(raw or b"").job
    except DecodeError:
        return None


class Inspector:
    """Read queues and tasks, and act on them (retry, delete, pause), through one broker."""

    def __init__(self, broker: RedisBroker) -> None:
        self.broker = broker
        self.client = broker.client

    def _keys(self, queue: str) -> QueueKeys:
        if queue not in self.broker.settings.queues:
            raise UnknownQueue(queue, self.broker.settings.queues)
        return self.broker.keys(queue)

    def _records(self, k: QueueKeys, ids: Sequence[str], field: str = "") -> list[Any]:
        """Fetch whole records ({} when gone), or one field of each, in one round trip."""
        # Any: redis-py's execute_command is untyped.
        pipe: Any = self.client.pipeline(transaction=False)
        for task_id in ids:
            # Undecoded, so a record holding invalid UTF-8 is reported instead of raising.
            if field:
                pipe.execute_command("HGET", k.task(task_id), field, **{NEVER_DECODE: True})
            else:
                pipe.execute_command("HGETALL", k.task(task_id), **{NEVER_DECODE: True})
        with self.broker.unavailable(writes=False):
            replies: list[Any] = pipe.execute(raise_on_error=False)
        for index, reply in enumerate(replies):
            if isinstance(reply, ResponseError):
                # A record key holding something else (written by hand): list the task with
                # what is wrong instead of failing the whole page.
                error = (
                    f"its record {k.task(ids[index])!r} is not a hash: it is not one of ours "
                    f"(written by hand or by another program?). Delete that key by hand "
                    f"(redis-cli DEL); nothing else uses our namespace."
                )
                replies[index] = None if field else {b"error": error.encode()}
        return replies

    def _idempotency_key(self, k: QueueKeys, raw: bytes | None) -> str | None:
        """The Redis key of the task's idempotency key, or None (none, or undecodable)."""
        try:
            message = decode(raw or b"")
        except DecodeError:
            return None
        if not message.idempotency_key:
            return None
        return k.idempotency(message.job, message.idempotency_key)

    # -- reading ----------------------------------------------------------------------------

    def queues(self) -> list[QueueInfo]:
        """Return every configured queue, in priority order, with its depths and counters."""
        names = self.broker.settings.queues
        day = today()
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            k = self.broker.keys(name)
            pipe.zcard(k.scheduled)
            pipe.llen(k.pending)
            pipe.llen(k.active)
            pipe.zcard(k.retry)
            pipe.zcard(k.dead)
            pipe.zcard(k.completed)
            pipe.exists(k.paused)
            pipe.get(k.processed(day))
            pipe.get(k.failed(day))
        with self.broker.unavailable(writes=False):
            replies = pipe.execute()
        infos = []
        for i, name in enumerate(names):
            row = replies[i * 9 : i * 9 + 9]  # nine replies per queue, in the order sent above
            scheduled, pending, active, retry, dead, completed, paused, processed, failed = row
            infos.append(
                QueueInfo(
                    name=name,
                    paused=bool(paused),
                    scheduled=scheduled,
                    pending=pending,
                    active=active,
                    retry=retry,
                    dead=dead,
                    completed=completed,
                    processed_today=_int(processed),
                    failed_today=_int(failed),
                )
            )
        return infos

    def tasks(
        self,
        queue: str,
        state: str,
        *,
        page: int = 1,
        per_page: int = 50,
        newest_first: bool = True,
    ) -> TaskPage:
        """Return one page of the tasks in a state, by index, so any page of any size is fast.

        Order is by the state's own time, latest first unless newest_first is False: enqueued
        (pending), started (active), due (scheduled, retry), died (dead), expiry (completed).
        """
        k = self._keys(queue)
        _check_state(state)
        if page < 1 or not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"page must be 1 or more and per_page 1 to {MAX_PER_PAGE}")
        start, stop = (page - 1) * per_page, page * per_page - 1
        key = k.state(state)
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
        with self.broker.unavailable(writes=False):
            total, ids = pipe.execute()
        if state in LISTS and not newest_first:
            ids.reverse()
        records = self._records(k, ids)
        return TaskPage(
            items=tuple(_task_info(queue, i, r, state) for i, r in zip(ids, records, strict=True)),
            total=total,
            page=page,
            per_page=per_page,
            has_next=start + len(ids) < total,
        )

    def task(self, queue: str, task_id: str) -> TaskInfo | None:
        """Return one task in full, or None if it is not in this queue (any more)."""
        k = self._keys(queue)
        (record,) = self._records(k, [task_id])
        return _task_info(queue, task_id, record, "") if record else None

    def find(self, task_id: str) -> TaskInfo | None:
        """Return a task from whichever configured queue holds it, or None."""
        for queue in self.broker.settings.queues:
            info = self.task(queue, task_id)
            if info is not None:
                return info
        return None

    def workers(self) -> list[WorkerInfo]:
        """Return the live workers (those whose heartbeat has not expired), in id order.

        Three round trips whatever the fleet: the registry, every worker's hash, then the job
        name of every running task.
        """
        namespace = self.broker.settings.namespace
        with self.broker.unavailable(writes=False):
            ids = sorted(
                typing.cast("list[str]", self.client.zrange(keys.workers(namespace), 0, -1))
            )
        pipe = self.client.pipeline(transaction=False)
        for worker_id in ids:
            pipe.hgetall(keys.worker(namespace, worker_id))
        with self.broker.unavailable(writes=False):
            hashes: list[dict[str, str]] = pipe.execute()
        # A worker that stopped beating keeps its registry entry until the next beat of any
        # worker drops it, but its hash has expired: it is not listed.
        found = [(i, h) for i, h in zip(ids, hashes, strict=True) if h]
        running = [_running_tasks(h.get("tasks")) for _, h in found]
        refs = [(q, t) for slots in running for (t, q) in slots]
        tasks: Any = self.client.pipeline(transaction=False)  # Any: execute_command is untyped
        for queue, task_id in refs:
            key = self.broker.keys(queue).task(task_id)
            tasks.execute_command("HGET", key, "msg", **{NEVER_DECODE: True})
        with self.broker.unavailable(writes=False):
            messages: list[bytes | None] = tasks.execute() if refs else []
        jobs = {ref: _job_name(raw) for ref, raw in zip(refs, messages, strict=True)}
        return [
            WorkerInfo(
                id=worker_id,
                host=h.get("host", ""),
                pid=_int(h.get("pid")),
                queues=tuple(q for q in h.get("queues", "").split(",") if q),
                concurrency=_int(h.get("concurrency")),
                started_at=_time(h.get("started")),
                last_beat=_time(h.get("last_beat")),
                tasks=tuple(RunningTask(t, q, jobs.get((q, t))) for t, q in slots),
            )
            for (worker_id, h), slots in zip(found, running, strict=True)
        ]

    # -- acting -----------------------------------------------------------------------------

    def retry(self, queue: str, task_id: str) -> bool:
        """Run a scheduled, retry or dead task now; False if it is in none of those states.

        A dead task starts again with a fresh budget of attempts and crashes.
        """
        k = self._keys(queue)
        with self.broker.unavailable(writes=False):
            state = self.client.hget(k.task(task_id), "state")
        return state in RUNNABLE and self.broker.run_now(queue, task_id, state)

    def delete(self, queue: str, task_id: str) -> bool:
        """Delete a task that is not running; False if it is gone (or moved twice meanwhile).

        Deleting releases the task's idempotency key (if it still holds it), so the same job can
        be enqueued again with the same key at once, inside its window. Raises ValueError if the
        task is running: wait until it finishes.
        """
        k = self._keys(queue)
        # The task may move between this read and the script (a worker took it, the forwarder
        # moved it); the script then answers "moved" and one more read catches up with it.
        for _ in range(2):
            (record,) = self._records(k, [task_id])
            state = record.get(b"state", b"").decode(errors="replace")
            if state not in State.ALL:  # gone (or a record without a state)
                return False
            if state == State.ACTIVE:
                raise _running(task_id)
            idem = self._idempotency_key(k, record.get(b"msg"))
            reply = self.broker.delete(queue, task_id, state, idem)
            if reply == State.ACTIVE:
                raise _running(task_id)
            if reply != "moved":
                return bool(reply)
        return False

    def retry_all_dead(self, queue: str) -> int:
        """Run every dead task of the queue now, BATCH_SIZE at a time; return how many ran."""
        k = self._keys(queue)
        retried = 0
        # Visit only the tasks dead at the start: tasks dying meanwhile cannot keep this going.
        with self.broker.unavailable(writes=False):
            left: int = self.client.zcard(k.dead)
        while left > 0:
            with self.broker.unavailable(writes=False):
                ids = typing.cast(
                    "list[str]", self.client.zrange(k.dead, 0, min(left, BATCH_SIZE) - 1)
                )
            if not ids:
                break
            # run_now takes each id out of the dead set, even one whose record is gone.
            retried += sum(self.broker.run_now(queue, task_id, State.DEAD) for task_id in ids)
            left -= len(ids)
        return retried

    def delete_all_dead(self, queue: str) -> int:
        """Delete every dead task of the queue, BATCH_SIZE at a time; return how many.

        Like `delete`, this releases the tasks' idempotency keys.
        """
        k = self._keys(queue)
        deleted = kept = 0
        with self.broker.unavailable(writes=False):
            left: int = self.client.zcard(k.dead)
        while left > 0:
            with self.broker.unavailable(writes=False):
                ids = typing.cast(
                    "list[str]", self.client.zrange(k.dead, kept, kept + min(left, BATCH_SIZE) - 1)
                )
            if not ids:
                break
            for task_id, raw in zip(ids, self._records(k, ids, "msg"), strict=True):
                idem = self._idempotency_key(k, raw)
                reply = self.broker.delete(queue, task_id, State.DEAD, idem)
                if reply == 1:
                    deleted += 1
                elif reply == 0:  # gone meanwhile (another operator): step over it
                    kept += 1
            left -= len(ids)
        return deleted

    def pause(self, queue: str) -> None:
        """Stop workers from taking tasks from the queue; running tasks finish."""
        k = self._keys(queue)
        with self.broker.unavailable():
            self.client.set(k.paused, "1")

    def resume(self, queue: str) -> None:
        """Let workers take tasks from a paused queue again."""
        k = self._keys(queue)
        with self.broker.unavailable():
            self.client.delete(k.paused)


def get_inspector() -> Inspector:
    """Return an Inspector over the broker for the current settings."""
    return Inspector(get_broker())
