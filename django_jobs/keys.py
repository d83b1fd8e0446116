"""Every Redis key django-jobs uses: `<namespace>:{<queue>}:<structure>`, and the worker registry.

The `{<queue>}` hash tag puts every key of one queue on one Redis Cluster slot, and every script
touches the keys of one slot: a queue's, the worker registry's (`<namespace>:{workers}` and
`<namespace>:{workers}:<id>`, one tag), a schedule's, a flow call's. A fetch over several queues
is one dequeue call per queue (broker/fetch.py); the tests check every call
(tests/integration/test_cluster_slots.py).

A task's record is the hash `<namespace>:{<queue>}:t:<id>`. Scripts that find ids in a structure
(dequeue, forward, recover, extend_lease, janitor) are given the prefix `<namespace>:{<queue>}:t:`
and append the id: the only keys built inside Lua, each in the slot of its queue's prefix, with
the limit keys of a job type (`running`, `parked`, `rate`, `limits`: see dequeue.lua), which the
scripts build from that prefix (or from a record's key, the prefix then `t:<id>`).

A sharded queue (`JOBS["QUEUES"] = {"default": {"shards": 8}}`, broker/shards.py) is one queue
per shard in here: its first shard is the queue itself (`{default}`), the others are named
`<queue>#<n>` (`{default#17}`), a name no queue of QUEUES can have (`#` is not allowed in one),
each its own slot. `logical_queue` gives back the queue of QUEUES a shard is of.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from functools import cached_property

#: What separates a queue's name from its shard's number in the name of a shard (not allowed in a
#: queue name: conf/queues.py).
SHARD_MARK = "#"


def logical_queue(name: str) -> str:
    """The queue of JOBS["QUEUES"] a queue of ours is, or is a shard of."""
    return name.partition(SHARD_MARK)[0]


def queue_label(name: str) -> str:
    """A queue in Redis as log lines name it: `'default'`, a shard as its queue of ours with the
    shard after it, `'default' (shard default#20)`."""
    queue = logical_queue(name)
    return repr(name) if queue == name else f"{queue!r} (shard {name})"


def shard_index(text: str, count: int) -> int:
    """Which of `count` shards `text` (an idempotency key as `<job>:<key>`, or a job name) goes
    to: the same in every process and release (CRC-32)."""
    return zlib.crc32(text.encode()) % count if count > 1 else 0


#: The job types whose tasks all go to one shard of a sharded queue, the one their name hashes
#: to (`shard_index`), idempotency keys included: those with a concurrency_limit or a rate_limit,
#: whose limit keys are a queue's, so a shard's (dequeue.lua), so that one set of them holds the
#: limit across every worker. Kept by the job registry as each class is defined (jobs.py).
one_shard_jobs: set[str] = set()


def idempotency_shard(job: str, key: str, count: int) -> int:
    """Which of `count` shards holds job's idempotency key `key` (and gets its task): the job
    name's for a job type of `one_shard_jobs`, else the key's."""
    return shard_index(job if job in one_shard_jobs else f"{job}:{key}", count)


class State:
    """The task states, as written in Redis, the admin and the API."""

    SCHEDULED = "scheduled"
    PENDING = "pending"
    ACTIVE = "active"
    RETRY = "retry"
    DEAD = "dead"
    COMPLETED = "completed"
    #: Canceled before it ran (pending, scheduled, retry), or stopped running when asked to
    #: (django_jobs.cancel): kept for its retention, like completed.
    CANCELED = "canceled"
    ALL = (SCHEDULED, PENDING, ACTIVE, RETRY, DEAD, COMPLETED, CANCELED)


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue in one namespace."""

    namespace: str
    queue: str
    #: The shards' queue names of a sharded queue (the first is `queue`), else (): the slot an
    #: idempotency key of a job whose home is this queue lives in is picked among them.
    shards: tuple[str, ...] = ()

    @cached_property
    def prefix(self) -> str:
        return f"{self.namespace}:{{{self.queue}}}"

    @cached_property
    def task_prefix(self) -> str:
        """Prefix of task record keys: append an id."""
        return f"{self.prefix}:t:"

    def task(self, task_id: str) -> str:
        """The hash holding one task's record and its mutable fields."""
        return f"{self.task_prefix}{task_id}"

    def idempotency(self, job_name: str, key: str) -> str:
        """The string holding the id of the first task accepted under (job, key); on a sharded
        queue, in the slot of the shard the key hashes to (`idempotency_shard`: a limited job
        type's, its name), where its tasks go too (broker/shards.py)."""
        if self.shards:
            shard = self.shards[idempotency_shard(job_name, key, len(self.shards))]
            return f"{self.namespace}:{{{shard}}}:idem:{job_name}:{key}"
        return f"{self.prefix}:idem:{job_name}:{key}"

    @cached_property
    def handoff(self) -> str:
        """Sorted set of the tasks handed off to another queue under an idempotency key in
        this queue's slot, scored by when (Redis time): see broker/handoff.py."""
        return f"{self.prefix}:handoff"

    @cached_property
    def handoff_tasks(self) -> str:
        """Hash: the enqueue of each task in `handoff` (JSON), to finish it."""
        return f"{self.prefix}:handoff:tasks"

    def state(self, state: str) -> str:
        """The structure of one state: a list for pending and active, a sorted set otherwise."""
        return f"{self.prefix}:{state}"

    @cached_property
    def pending(self) -> str:
        return self.state(State.PENDING)

    @cached_property
    def active(self) -> str:
        return self.state(State.ACTIVE)

    @cached_property
    def scheduled(self) -> str:
        return self.state(State.SCHEDULED)

    @cached_property
    def retry(self) -> str:
        return self.state(State.RETRY)

    @cached_property
    def dead(self) -> str:
        return self.state(State.DEAD)

    @cached_property
    def completed(self) -> str:
        return self.state(State.COMPLETED)

    @cached_property
    def canceled(self) -> str:
        return self.state(State.CANCELED)

    @cached_property
    def lease(self) -> str:
        """Sorted set of active task ids, scored by lease deadline (Redis time, seconds)."""
        return f"{self.prefix}:lease"

    @cached_property
    def paused(self) -> str:
        """Present while the queue is paused."""
        return f"{self.prefix}:paused"

    @cached_property
    def guard(self) -> str:
        """A key never written, named by the scripts that build keys inside Lua (the records
        of forward, recover, extend_lease and janitor, the limit keys of ack, retry, kill,
        requeue and end_canceled, the canceled set of retry, requeue and recover), so that a
        Redis Cluster node moving this queue's slot refuses them (TRYAGAIN) before they start,
        rather than stop them half-way at a key already moved (broker/cluster.py; dequeue
        names `paused`, which exists only while it does nothing)."""
        return f"{self.prefix}:guard"

    @cached_property
    def wake(self) -> str:
        """A short list of wake-up tokens that idle workers block on."""
        return f"{self.prefix}:wake"

    def processed(self, day: str) -> str:
        """Counter of tasks completed on a UTC day (YYYY-MM-DD)."""
        return f"{self.prefix}:processed:{day}"

    def failed(self, day: str) -> str:
        """Counter of failed runs on a UTC day (YYYY-MM-DD)."""
        return f"{self.prefix}:failed:{day}"

    def cancel_request(self, token: str) -> str:
        """The state a cancel call (its token) took a task from, kept a few minutes when the
        task's retention of 0 deleted its record, so that a replay of the call answers as the
        call did (cancel.lua)."""
        return f"{self.prefix}:cancel:{token}"

    def running(self, job: str) -> str:
        """Sorted set of the tasks of a job type with a concurrency_limit that hold a slot,
        scored by lease deadline (see dequeue.lua)."""
        return f"{self.prefix}:running:{job}"

    def parked(self, job: str) -> str:
        """List of the tasks of a job type waiting for a slot of its concurrency_limit; the
        oldest on the right."""
        return f"{self.prefix}:parked:{job}"

    def rate(self, job: str) -> str:
        """Hash counting the starts of a job type with a rate_limit in the current window and
        the tasks booked in later ones."""
        return f"{self.prefix}:rate:{job}"

    @cached_property
    def limits(self) -> str:
        """Hash of the job types with parked tasks -> their concurrency_limit (the recoverer's
        sweep reads it)."""
        return f"{self.prefix}:limits"


def tagged_queue(key: str) -> str:
    """The queue of a key of ours: the text of its `{<queue>}` hash tag, which decides its slot
    (a namespace holds no "{")."""
    start = key.index("{") + 1
    return key[start : key.index("}", start)]


def workers(namespace: str) -> str:
    """Sorted set of worker ids, scored by their last heartbeat (epoch seconds). Its hash tag
    puts it on the slot of every worker's hash, which the beat script writes with it."""
    return f"{namespace}:{{workers}}"


def worker(namespace: str, worker_id: str) -> str:
    """Hash describing one worker (host, pid, queues, tasks...); expires unless renewed."""
    return f"{namespace}:{{workers}}:{worker_id}"


def schedules(namespace: str) -> str:
    """Set of the schedule names whose state Redis holds (to delete those no longer configured)."""
    return f"{namespace}:schedules"


def schedule(namespace: str, name: str) -> str:
    """Hash of one schedule's state: last_fire, last_fired_at, last_task_id, last_task_queue,
    paused."""
    return f"{namespace}:schedule:{name}"


def schedule_fires(namespace: str, name: str) -> str:
    """List of one schedule's last fires (JSON), newest first."""
    return f"{namespace}:schedule:{name}:fires"


_day: tuple[int, str] = (-1, "")


def today() -> str:
    """The UTC day that names today's processed/failed counters (YYYY-MM-DD)."""
    global _day
    second = int(time.time())
    if _day[0] != second:  # formatted at most once a second: a worker asks once per task
        _day = (second, time.strftime("%Y-%m-%d", time.gmtime(second)))
    return _day[1]
