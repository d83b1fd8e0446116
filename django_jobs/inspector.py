"""The one read/mutate API over the broker: the admin, the REST API and the CLI all use it.

It holds the rules, the broker holds the queries (broker/inspect.py): which queues exist, which
tasks may be retried (`may_retry`), the one task listing the admin and the API page through
(`list_tasks`), and the batches of the "all dead" actions. Reads cost a fixed number of round
trips whatever the size of a queue; changes go through the broker's scripts, so an operator's
action is one atomic transition like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from django_jobs.broker import listing
from django_jobs.broker.info import (
    Fire,
    QueueInfo,
    RunningTask,
    ScheduleInfo,
    TaskInfo,
    WorkerInfo,
    check_state,
)
from django_jobs.broker.listing import LIST_BYTES, TIME_FIELDS, TaskListing
from django_jobs.broker.protocol import Broker, Deleted
from django_jobs.broker.shards import merged, shards_for
from django_jobs.client import get_broker
from django_jobs.cursor import MAX_OFFSET
from django_jobs.exceptions import TaskRunning, UnknownQueue
from django_jobs.jobs import registry
from django_jobs.keys import SHARD_MARK, State, logical_queue
from django_jobs.schedules.firing import ScheduleActions

__all__ = [
    "TIME_FIELDS",
    "Fire",
    "Inspector",
    "QueueInfo",
    "RunningTask",
    "ScheduleInfo",
    "TaskInfo",
    "TaskListing",
    "TaskPage",
    "WorkerInfo",
    "get_inspector",
    "may_retry",
]

#: Dead tasks read and handled per round by retry_all_dead and delete_all_dead.
BATCH_SIZE = 500
#: The largest page `tasks` serves.
MAX_PER_PAGE = 1000
#: How deep `tasks` pages a sharded queue (merged on the time: a page reads those before it).
MAX_MERGED = 10_000

#: The states an operator may retry a task from ("retry now", DESIGN.md section 4): a task
#: waiting for its next attempt, or dead. The admin and the API both ask `may_retry`.
RETRYABLE = frozenset({State.RETRY, State.DEAD})
#: Why a task in another state was not retried, for the admin's messages and the API's 409.
RETRY_RULE = "only dead and retrying tasks can be retried"


def may_retry(state: str) -> bool:
    """Whether an operator may retry (run now) a task in this state."""
    return state in RETRYABLE


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of the tasks in a state; `total` counts the whole state."""

    items: tuple[TaskInfo, ...]
    total: int
    page: int
    per_page: int
    has_next: bool


class Inspector:
    """Read queues and tasks, and act on them (retry, delete, pause), through one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._schedules = ScheduleActions(broker)
        #: A sharded queue is one queue here, its shards (broker/shards.py) each a queue of the
        #: broker's: counts are sums over them, an action acts on every one.
        self.shards = shards_for(broker.settings)

    def _check_queue(self, queue: str) -> tuple[str, ...]:
        """The queue's shards (itself unless sharded); UnknownQueue if it is not ours."""
        if queue not in self.broker.settings.known_queues:
            raise UnknownQueue(queue, self.broker.settings.known_queues)
        return self.shards.of(queue)

    def _shard_of(self, queue: str, task_id: str) -> str:
        """The shard of queue holding the task (the queue itself unless sharded; the first
        shard when none holds it: every read then finds nothing)."""
        shards = self._check_queue(queue)
        for shard in shards if len(shards) > 1 else ():
            if self.broker.task_state(shard, task_id) is not None:
                return shard
        return shards[0]

    def _idempotency_key(self, task: TaskInfo | None) -> str | None:
        """The Redis key of the task's idempotency key (its job type's home queue's: see
        broker/handoff.py), or None (none, undecodable, gone)."""
        if not (task and task.job and task.idempotency_key):
            return None
        job = registry.jobs.get(task.job)
        home = job.idempotency_queue() if job else logical_queue(task.queue)
        return self.broker.keys(home).idempotency(task.job, task.idempotency_key)

    # -- reading ----------------------------------------------------------------------------

    def queues(self) -> list[QueueInfo]:
        """Every configured queue in priority order, with its depths and counters; then the
        flows' pair when it holds a task or is paused (a dead flow event must be seen)."""
        settings = self.broker.settings
        infos = merged(self.broker.queue_infos(self.shards.expand(settings.known_queues)))
        return [i for i in infos if i.name in settings.queues or i.paused or i.holds_tasks]

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
        A sharded queue's shards are merged on that time (`list_tasks`), so page n reads the
        pages before it too: the admin pages a sharded queue through list_tasks' cursor.
        """
        shards = self._check_queue(queue)
        check_state(state)
        if page < 1 or not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"page must be 1 or more and per_page 1 to {MAX_PER_PAGE}")
        start = min(page - 1, MAX_OFFSET // per_page) * per_page  # past every end, not int64
        if len(shards) > 1:
            total, items = self._merged_page(shards, state, start, per_page, newest_first)
        else:
            total, ids = self.broker.state_ids(
                queue, state, start, start + per_page - 1, newest_first=newest_first
            )
            items = self.broker.task_rows(queue, ids, state, budget=LIST_BYTES) if ids else []
        return TaskPage(
            items=tuple(_logical(info) for info in items),
            total=total,
            page=page,
            per_page=per_page,
            has_next=start + per_page < total,
        )

    def _merged_page(
        self, shards: tuple[str, ...], state: str, start: int, per_page: int, newest_first: bool
    ) -> tuple[int, list[TaskInfo]]:
        """A sharded queue's tasks start..start+per_page of `state`, merged on the state's time
        over its shards (the first `start` read and left out), and their total."""
        wanted = start + per_page
        if wanted > MAX_MERGED:
            raise ValueError(
                f"a page of a sharded queue ends {MAX_MERGED} tasks deep at most (each page "
                f"reads those before it): page through list_tasks' next_offsets instead"
            )
        found = listing.list_tasks(
            self.broker, state, shards, per_page=wanted, newest_first=newest_first,
            chunk=per_page, budget=wanted + per_page * len(shards),
        )  # fmt: skip
        return found.total, found.items[start:]

    def task(self, queue: str, task_id: str) -> TaskInfo | None:
        """Return one task in full, or None if it is not in this queue (any more)."""
        for shard in self._check_queue(queue):
            (info,) = self.broker.task_infos(shard, [task_id])
            if info is not None:
                return _logical(info)
        return None

    def find(self, task_id: str) -> TaskInfo | None:
        """Return a task from whichever queue of ours holds it, or None."""
        for queue in self.broker.settings.known_queues:
            info = self.task(queue, task_id)
            if info is not None:
                return info
        return None

    def locate(self, ids: list[str]) -> dict[str, str]:
        """The queue of each of ids found in a queue of ours (ids in none are left out), one
        round trip per queue at most: what an action on tasks listed from every queue needs."""
        found: dict[str, str] = {}
        for queue in self.shards.expand(self.broker.settings.known_queues):
            left = [task_id for task_id in ids if task_id not in found]
            if not left:
                break
            rows = self.broker.task_rows(queue, left, "")
            found.update((info.id, logical_queue(queue)) for info in rows)
        return found

    def workers(self) -> list[WorkerInfo]:
        """Return the live workers (those whose heartbeat has not expired), in id order."""
        return self.broker.workers()

    def list_tasks(
        self,
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
        """The one task listing of the admin and the API: up to per_page tasks of `state` in
        `queues`, merged on the state's time (`TIME_FIELDS`), newest first by default.

        Filters: `job` (its exact name) and `key_contains` (part of the idempotency key). Each
        queue is read `chunk` tasks per round trip; a call reads at most about `budget` task
        records and LIST_BYTES, then stops even if the page is not full, and says where to go
        on from: `offsets` is None for the first page, else the next_offsets of the previous
        answer. Tasks entering or leaving the state between calls shift the offsets. A sharded
        queue's shards are each a queue here: the budget is at least two chunks of each (the
        merge reads a chunk of every one before it hands a task out)."""
        names = self.shards.expand(queues)
        if len(names) > len(queues):
            budget = max(budget, 2 * chunk * len(names))
        found = listing.list_tasks(
            self.broker, state, names, offsets=offsets, job=job, key_contains=key_contains,
            per_page=per_page, newest_first=newest_first, chunk=chunk, budget=budget,
        )  # fmt: skip
        return replace(found, items=[_logical(info) for info in found.items])

    # -- acting -----------------------------------------------------------------------------

    def retry(self, queue: str, task_id: str) -> bool:
        """Run a task now if `may_retry` allows its state; False if it does not (or it is gone).

        A dead task starts again with a fresh budget of attempts and crashes.
        """
        shard = self._shard_of(queue, task_id)
        state = self.broker.task_state(shard, task_id)
        return state is not None and may_retry(state) and self.broker.run_now(shard, task_id, state)

    def delete(self, queue: str, task_id: str) -> bool:
        """Delete a task not running, or a broken record (`discard`); False if gone (or moved).

        Deleting releases the task's idempotency key (if it still holds it), so the same job can
        be enqueued again with the same key at once, inside its window. Raises TaskRunning if
        the task is running: wait until it finishes.
        """
        shard = self._shard_of(queue, task_id)
        # The task may move between this read and the script (a worker took it, the forwarder
        # moved it); the script then answers MOVED and one more read catches up with it.
        for _ in range(2):
            task = next(iter(self.broker.task_rows(shard, [task_id], "")), None)  # no traceback
            if task is None or task.state not in State.ALL:  # gone, not a hash, or no state
                return self.broker.discard(shard, task_id)
            if task.state == State.ACTIVE:
                raise TaskRunning(task_id, queue)
            reply = self.broker.delete(shard, task_id, task.state, self._idempotency_key(task))
            if reply is Deleted.RUNNING:
                raise TaskRunning(task_id, queue)
            if reply is not Deleted.MOVED:
                return reply is Deleted.DELETED
        return False

    def _each(
        self,
        queue: str,
        state: str,
        act: Callable[[str, list[str]], tuple[int, int]],
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Hand the ids of the queue's tasks in state (only those there at the start) to act,
        with their shard (the queue itself unless sharded), BATCH_SIZE at a time, oldest first;
        act answers how many it acted on and left in the state, on_batch (a progress bar) how
        many each batch visited. Returns how many acted on."""
        done = 0
        for shard in self._check_queue(queue):
            kept = 0
            left: int | None = None
            while left is None or left > 0:
                size = BATCH_SIZE if left is None else min(left, BATCH_SIZE)
                total, ids = self.broker.state_ids(
                    shard, state, kept, kept + size - 1, newest_first=False
                )
                left = total if left is None else left
                if not ids:
                    break
                acted, stayed = act(shard, ids)
                done, kept, left = done + acted, kept + stayed, left - len(ids)
                if on_batch is not None:
                    on_batch(len(ids))
        return done

    def retry_all_dead(self, queue: str, on_batch: Callable[[int], None] | None = None) -> int:
        """Run every dead task of the queue now, BATCH_SIZE at a time; return how many ran."""

        def run(shard: str, ids: list[str]) -> tuple[int, int]:  # every id out, even gone ones
            return sum(self.broker.run_now(shard, task_id, State.DEAD) for task_id in ids), 0

        return self._each(queue, State.DEAD, run, on_batch)

    def delete_all_dead(self, queue: str, on_batch: Callable[[int], None] | None = None) -> int:
        """Delete every dead task of the queue (`purge` of the dead state); return how many."""
        return self.purge(queue, State.DEAD, on_batch)

    def purge(self, queue: str, state: str, on_batch: Callable[[int], None] | None = None) -> int:
        """Delete every task of the queue in a state but active, releasing idempotency keys as
        `delete` does; return how many."""
        check_state(state)
        if state == State.ACTIVE:
            raise ValueError("Running (active) tasks cannot be purged: they finish or time out.")

        def remove(shard: str, ids: list[str]) -> tuple[int, int]:
            tasks = self.broker.task_rows(shard, ids, state)  # every id: listed
            replies = [
                self.broker.delete(shard, task_id, state, self._idempotency_key(task))
                for task_id, task in zip(ids, tasks, strict=True)
            ]
            # Every id visited has left the state: deleted, gone, or moved on meanwhile (a worker,
            # the forwarder, another operator; delete.lua leaves those be). So the next batch
            # starts at the same offset.
            return replies.count(Deleted.DELETED), 0

        return self._each(queue, state, remove, on_batch)

    def pause(self, queue: str) -> None:
        """Stop workers from taking tasks from the queue (every shard of it); running tasks
        finish."""
        for shard in self._check_queue(queue):
            self.broker.pause(shard)

    def resume(self, queue: str) -> None:
        """Let workers take tasks from a paused queue (every shard of it) again."""
        for shard in self._check_queue(queue):
            self.broker.resume(shard)

    # -- schedules (the rules in django_jobs.schedules.firing) ------------------------------

    def schedules(self) -> list[ScheduleInfo]:
        """Every configured schedule, by name, with its next and last fire and paused flag."""
        return self._schedules.infos()

    def schedule(self, name: str) -> ScheduleInfo:
        """One configured schedule; raises UnknownSchedule for a name not configured."""
        return self._schedules.one(name)

    def fire_history(self, name: str) -> list[Fire]:
        """The schedule's last fires (at most 50), newest first; raises UnknownSchedule."""
        return self._schedules.history(name)

    def run_schedule_now(self, name: str) -> str:
        """Enqueue one fire of the schedule now (not a fire time: the next fire time still
        fires); return the task id. Raises UnknownSchedule."""
        return self._schedules.run_now(name)

    def pause_schedule(self, name: str) -> None:
        """Stop the schedule firing: its fire times pass without a task until resumed (no
        catch-up of them). Raises UnknownSchedule."""
        self._schedules.pause(name)

    def resume_schedule(self, name: str) -> None:
        """Let a paused schedule fire again, from its next fire time. Raises UnknownSchedule."""
        self._schedules.resume(name)


def _logical(info: TaskInfo) -> TaskInfo:
    """A task as users see it: on its queue, not on a shard of it."""
    return replace(info, queue=logical_queue(info.queue)) if SHARD_MARK in info.queue else info


def get_inspector() -> Inspector:
    """Return an Inspector over the broker for the current settings."""
    return Inspector(get_broker())
