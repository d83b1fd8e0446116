"""The one task listing of the admin, the API and the CLI (`Inspector.list_tasks`): a state's
tasks in several queues, merged on the state's time, filtered, paged by each queue's offset.

What one call costs is bounded whatever the queues hold: at most about `budget` records
visited and `LIST_BYTES` read out of Redis. A filter (a job, a search of the idempotency key)
is decided in Redis (read_fields.lua): a record it skips leaves a mark of a byte, not itself,
so a filter that visits thousands of large records moves little more than the matches. No index
is kept: one per job would cost every state change on the hot path (dequeue, ack, retry,
recover move a task between structures) a write more, for a filter an operator runs rarely.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from django_jobs.broker.info import TaskInfo
from django_jobs.broker.protocol import Broker
from django_jobs.keys import State

#: Most bytes of task records one listing reads (it stops there and says where to go on from).
#: A listing reads no tracebacks and cuts errors.
LIST_BYTES = 8 * 1024 * 1024

#: The time each state's structure is ordered by, used to merge queues.
TIME_FIELDS = {
    State.SCHEDULED: "next_at",
    State.PENDING: "enqueued_at",
    State.ACTIVE: "started_at",
    State.RETRY: "next_at",
    State.DEAD: "died_at",
    State.COMPLETED: "completed_at",
    State.CANCELED: "canceled_at",
}


@dataclass(frozen=True)
class TaskListing:
    """One answer of `list_tasks`: the tasks found, and where to go on from."""

    items: list[TaskInfo]
    #: Each unfinished queue's offset into the state, or None: nothing is left.
    next_offsets: dict[str, int] | None
    #: Tasks in the state in the queues listed, before any filter.
    total: int
    #: Task records visited to answer.
    scanned: int


@dataclass
class _Run:
    """One queue's tasks in one state, read chunk by chunk from an offset."""

    queue: str
    offset: int  # index of the next task to hand out
    read_to: int  # index after the last task read
    more: bool = True  # whether the state has tasks past read_to
    #: The matches read and not handed out yet, with their index.
    buffer: deque[tuple[int, TaskInfo]] = field(default_factory=deque)


def _time_key(task: TaskInfo, state: str) -> float:
    value: datetime | None = getattr(task, TIME_FIELDS[state])
    return value.timestamp() if value is not None else float("-inf")


def list_tasks(
    broker: Broker,
    state: str,
    queues: tuple[str, ...],
    *,
    offsets: dict[str, int] | None = None,
    job: str | None = None,
    key_contains: str = "",
    per_page: int = 50,
    newest_first: bool = True,
    chunk: int = 100,
    budget: int = 1000,
) -> TaskListing:
    """See Inspector.list_tasks."""
    offsets = dict.fromkeys(queues, 0) if offsets is None else offsets
    runs = [_Run(q, offsets[q], offsets[q]) for q in queues if q in offsets]
    found: list[TaskInfo] = []
    scanned = spent = 0
    while len(found) < per_page:
        for run in runs:
            if run.buffer or not run.more:
                continue
            if scanned >= budget or spent >= LIST_BYTES:
                break
            at, end = run.read_to, run.read_to + chunk - 1
            total, ids = broker.state_ids(run.queue, state, at, end, newest_first=newest_first)
            rows = broker.task_matches(run.queue, ids, state, job=job, text=key_contains,
                                       budget=LIST_BYTES - spent)  # fmt: skip
            matches = [(at + i, row) for i, row in enumerate(rows) if row is not None]
            scanned += len(rows)
            spent += len(rows) + sum(len(row.raw) + len(row.error or "") for _, row in matches)
            run.buffer.extend(matches)
            run.read_to += len(rows)
            run.more = run.read_to < total and bool(rows)
            if not run.buffer:  # nothing in what was read: the cursor moves past it
                run.offset = run.read_to
        else:
            heads = [run for run in runs if run.buffer]
            if not heads:
                if any(run.more for run in runs):
                    continue  # a chunk without a match: read on
                break
            if any(run.more and not run.buffer for run in runs):
                continue  # a run whose next (newer) match is not read yet: read it first
            pick = (max if newest_first else min)(
                heads, key=lambda r: _time_key(r.buffer[0][1], state)
            )
            index, task = pick.buffer.popleft()
            pick.offset = index + 1 if pick.buffer else pick.read_to
            if (job is None or task.job == job) and task.key_matches(key_contains):
                found.append(task)
            continue
        break  # the budget is spent
    left = {run.queue: run.offset for run in runs if run.buffer or run.more}
    # One more round trip, for a total that does not depend on how far the cursor went.
    total = sum(info.count(state) for info in broker.queue_infos(queues))
    return TaskListing(items=found, next_offsets=left or None, total=total, scanned=scanned)
