"""The broker's read side and operator actions: what the Inspector asks of Redis.

As asynq keeps `inspect.go` beside `rdb.go`, the queries the admin, the API and the CLI need
live here, next to the scripts, and nothing outside `broker/` touches a Redis client. Each call
runs inside the unavailability handling (`writes=False` for reads), costs a fixed number of
round trips whatever the size of a queue, and answers with the dataclasses of info.py (a task's
built by records.py). Nothing here calls KEYS or SCAN.

A record that cannot be decoded is returned with `decode_error` set instead of failing a page,
and a record key of another type with what is wrong in `error`: the admin is where an operator
goes to find such a task and delete it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
from django_jobs.broker.records import (
    FULL,
    READ_BATCH,
    ROW,
    SMALL,
    SMALL_LIMIT,
    decode_message,
    fields_of,
    orphan,
    parse_int,
    parse_time,
    task_info,
)
from django_jobs.keys import State, logical_queue, today, worker, workers


def _in_message(text: str) -> str:
    """Text as an encoded message holds it (message.encode: JSON, ensure_ascii off)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


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
        """Every queue of names, in that order, with its depths and today's counters: one round
        trip, and one more for the parked lists when a queue has job types with parked tasks."""
        day = today()
        commands: list[tuple[Any, ...]] = []
        for name in names:
            k = self.keys(name)
            commands += [("ZCARD", k.scheduled), ("LLEN", k.pending), ("LLEN", k.active),
                         ("ZCARD", k.retry), ("ZCARD", k.dead), ("ZCARD", k.completed),
                         ("EXISTS", k.paused), ("GET", k.processed(day)),
                         ("GET", k.failed(day)), ("ZCARD", k.canceled),
                         ("HKEYS", k.limits)]  # fmt: skip
        replies = self._check(commands, self._read(commands))
        width = 11  # replies per queue, in the order sent above
        parked = self._parked(names, [replies[i * width + 10] for i in range(len(names))])
        infos = []
        for i, name in enumerate(names):
            row = replies[i * width : i * width + width]
            scheduled, pending, active, retry, dead, completed, paused, processed, failed = row[:9]
            infos.append(
                QueueInfo(name, bool(paused), scheduled, pending, active, retry, dead, completed,
                          processed_today=parse_int(processed), failed_today=parse_int(failed),
                          canceled=row[9], parked=parked[i])
            )  # fmt: skip
        return infos

    def _parked(self, names: Sequence[str], jobs: Sequence[list[bytes]]) -> list[int]:
        """How many tasks are parked in each queue of names, summed over the parked lists of
        the job types its `limits` hash names (jobs: its HKEYS), in one round trip (none when
        no queue has any)."""
        commands = [
            ("LLEN", self.keys(name).parked(job.decode(errors="replace")))
            for name, each in zip(names, jobs, strict=True)
            for job in each
        ]
        lengths = iter(self._check(commands, self._read(commands)))
        return [sum(next(lengths) for _ in each) for each in jobs]

    def _check(self, commands: Sequence[tuple[Any, ...]], replies: list[Any]) -> list[Any]:
        """The replies of count commands, or a BrokerRefused naming the key of ours that holds
        another type (written by hand) where one replied with an error."""
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, ResponseError):
                verb, key = command
                (kind,) = self._read([("TYPE", key)])
                expected = {"ZCARD": "sorted set", "LLEN": "list", "HKEYS": "hash"}.get(verb)
                raise wrong_key(key, bytes(kind).decode(errors="replace"), expected or "string")
        return replies

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
        id whose record is gone is then listed with that state and NO_RECORD (an orphan, so
        that it can be deleted); without `listed`, with the state whose structure lists it (one
        more round trip), or None when none does.
        """
        return self._infos(queue, ids, listed, FULL, budget=None)

    def task_rows(
        self, queue: str, ids: Sequence[str], listed: str, *, budget: int | None = None
    ) -> list[TaskInfo]:
        """The tasks of ids, found in state `listed` ("": those that exist), as a listing shows
        them (ROW: no traceback, the error cut), 100 a round trip; no more records once about
        `budget` bytes are read, so fewer than ids may come back (at least one)."""
        return [info for info in self._infos(queue, ids, listed, ROW, budget) if info is not None]

    def task_matches(
        self,
        queue: str,
        ids: Sequence[str],
        listed: str,
        *,
        job: str | None = None,
        text: str = "",
        budget: int | None = None,
    ) -> list[TaskInfo | None]:
        """As `task_rows`, for a filter: the tasks of job `job` (its exact name) whose message
        holds `text`, decided in Redis (what does not match leaves nothing of it but a mark).
        One per id read, in order (fewer than ids once about `budget` bytes are read), None
        for each that does not match. A match of `text` may be anywhere in the message: the
        caller checks where (`TaskInfo.key_matches`)."""
        match = (_in_message(job or ""), _in_message(text))
        return self._infos(queue, ids, listed, ROW, budget, match)

    def _infos(
        self,
        queue: str,
        ids: Sequence[str],
        listed: str,
        view: tuple[tuple[str, int], ...],
        budget: int | None,
        match: tuple[str, str] = ("", ""),
    ) -> list[TaskInfo | None]:
        if not ids:
            return []
        k = self.keys(queue)
        large = [(name, self._limit(name, limit)) for name, limit in view]
        limits = [*((name, SMALL_LIMIT) for name in SMALL), *large]
        head = [SMALL_LIMIT, *match, len(SMALL), *SMALL, *(x for pair in large for x in pair)]
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
        gone: list[int] = []  # where an id without a record is, when no listing says its state
        for task_id, row in zip(ids, reply, strict=False):  # fewer replies: the budget is spent
            if isinstance(row, bytes):
                # A record key holding something else (written by hand): list the task with
                # what is wrong instead of failing the whole page.
                error = (
                    f"its record {k.task(task_id)!r} is not a hash but a "
                    f"{row.decode(errors='replace')}: it is not one of ours (written by hand or "
                    f"by another program?). Deleting the task deletes that key."
                )
                infos.append(task_info(queue, task_id, {"error": error}, listed))
            elif isinstance(row, list):
                fields, cut, msg = fields_of(limits, row)
                infos.append(task_info(queue, task_id, fields, listed, cut, msg))
            elif row == 1:  # not a match of the filter
                infos.append(None)
            else:  # no such key: an id listed without its record (an eviction?), or none
                gone += [] if listed else [len(infos)]
                infos.append(orphan(queue, task_id, listed) if listed else None)
        for i, state in zip(gone, self._listed_in(queue, [ids[i] for i in gone]), strict=True):
            infos[i] = orphan(queue, ids[i], state) if state else None
        return infos

    def _listed_in(self, queue: str, ids: Sequence[str]) -> list[str]:
        """The state whose structure lists each id ("" where none does), in one round trip."""
        if not ids:
            return []
        k = self.keys(queue)
        verbs = [("LPOS" if state in LISTS else "ZSCORE", k.state(state)) for state in State.ALL]
        replies = self._read([(verb, key, task_id) for task_id in ids for verb, key in verbs])
        width = len(verbs)
        return [
            next((state for state, found in zip(State.ALL, replies[at : at + width], strict=True)
                  if found is not None and not isinstance(found, ResponseError)), "")
            for at in range(0, len(replies), width)
        ]  # fmt: skip

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
            ref: None if isinstance(raw, ResponseError) else decode_message(raw, ref[1], ref[0])[0]
            for ref, raw in zip(refs, messages, strict=True)
        }
        return [
            WorkerInfo(
                id=worker_id,
                host=h.get("host", ""),
                pid=parse_int(h.get("pid")),
                queues=tuple(q for q in h.get("queues", "").split(",") if q),
                concurrency=parse_int(h.get("concurrency")),
                started_at=parse_time(h.get("started")),
                last_beat=parse_time(h.get("last_beat")),
                tasks=tuple(  # each on its queue of ours: the beat names its shard (to read it)
                    RunningTask(
                        t, logical_queue(q), message.job if (message := jobs.get((q, t))) else None
                    )
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
