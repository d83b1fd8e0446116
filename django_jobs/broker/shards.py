"""Sharded queues: one queue of JOBS["QUEUES"] split over several Redis Cluster slots.

`JOBS["QUEUES"] = {"critical": {}, "default": {"shards": 8}, "low": {}}` makes `default` eight
queues in Redis, its shards, each on a slot of its own (keys.py names them: `{default}`, then
`{default#<n>}`), so that on a Cluster the work of one hot queue spreads over the masters instead
of loading the one that owns `{default}`. Everything users see stays one queue: an enqueue names
`default`, the admin, the API, the CLI and the metrics show `default` (the sums over its shards),
pause and resume act on every shard. The shards are the broker's business:

- **Producers** spread tasks over the shards (`route`): each enqueue call of a process takes the
  next shard (round robin, from a start of its own), a batch one shard for all of it; a task
  with an idempotency key goes to the shard its key hashes to (`keys.shard_index`), the shard
  whose slot holds that key (`QueueKeys.idempotency`), so the key is still refused on every
  shard and every queue, in the one round trip of an enqueue to its home queue (broker/handoff.py
  for another queue).
- **Limited job types** (a concurrency_limit or a rate_limit: `keys.one_shard_jobs`) do not
  spread: every task of one, keyed or not, goes to the shard its name hashes to, with its
  idempotency keys. Their limits are counted in keys of the queue a task is on (dequeue.lua),
  which on a Cluster cannot be shared by two slots: on one shard, the one set of them holds the
  limit across every worker, as on a queue of one shard.
- **Workers** serve the shards of a queue as one level of the queues' strict priority
  (`levels`; broker/fetch.py): a critical task goes before any shard of default, and among the
  shards of one level the lead moves to the next shard after every fetch, so every shard with
  work is taken from in turn and none starves.
- **Slots**: shard n's name is the first `<queue>#<j>` (j counting up) whose slot is near the
  n-th point of a van der Corput sequence over the 16384 slots, from the slot of `{<queue>}`:
  any first N shards are spread evenly over the slots, so a Cluster whose masters hold equal
  ranges (as `redis-cli --cluster create` makes) gets about N / masters shards on each. A name
  never depends on how many shards there are: raising `shards` keeps every shard there was.

FIFO holds within a shard only: two tasks enqueued one after the other may run in either order.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import fields, replace

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from django_jobs.broker.info import QueueInfo
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.conf import JobsSettings
from django_jobs.keys import SHARD_MARK, logical_queue, one_shard_jobs, shard_index

#: The counts of a QueueInfo, summed over a queue's shards.
COUNTS = tuple(f.name for f in fields(QueueInfo) if f.type in (int, "int"))


def _spread(n: int) -> float:
    """The n-th point of the van der Corput sequence (base 2) in [0, 1): 0, 1/2, 1/4, 3/4..."""
    point, part = 0.0, 0.5
    while n:
        point, n, part = point + part * (n & 1), n >> 1, part / 2
    return point


@functools.cache
def shard_names(queue: str, count: int) -> tuple[str, ...]:
    """The names of the first `count` shards of queue (see the module): `queue` first."""
    names = [queue]
    start = key_slot(queue.encode())
    tries = itertools.count(1)
    for n in range(1, count):
        target = start + REDIS_CLUSTER_HASH_SLOTS * _spread(n)
        # Within an eighth of the gap between the points the first n+1 shards make.
        half = REDIS_CLUSTER_HASH_SLOTS / (8 * (1 << n.bit_length()))
        for j in tries:
            name = f"{queue}{SHARD_MARK}{j}"
            off = (key_slot(name.encode()) - target) % REDIS_CLUSTER_HASH_SLOTS
            if min(off, REDIS_CLUSTER_HASH_SLOTS - off) <= half:
                names.append(name)
                break
    return tuple(names)


def _job_of(encoded: str) -> str:
    """The job name of an encoded message, read as dequeue.lua does: after its first
    `,"job":"` (message.encode writes it so), up to the next quote."""
    at = encoded.find(',"job":"') + 8
    return encoded[at : encoded.find('"', at)] if at >= 8 else ""


class Shards:
    """The shards of the queues of one JOBS setting (see the module)."""

    def __init__(self, settings: JobsSettings) -> None:
        #: The sharded queues' shard names (a queue of one shard is not in it).
        self.names = {q: shard_names(q, n) for q, n in settings.queue_shards.items() if n > 1}
        #: (queue, pid) -> this process's turns over the queue's shards (a forked child its own).
        self._turns: dict[tuple[str, int], Iterator[int]] = {}
        self._levels: dict[tuple[str, ...], tuple[int, ...]] = {}

    def of(self, queue: str) -> tuple[str, ...]:
        """The queues in Redis of one queue of ours: its shards, or itself."""
        return self.names.get(queue, (queue,))

    def expand(self, queues: Sequence[str]) -> tuple[str, ...]:
        """Queues of ours as the queues in Redis to serve, in the same priority order (shards
        already among them kept once: expanding twice changes nothing)."""
        if not self.names:
            return tuple(queues)
        return tuple(dict.fromkeys(name for queue in queues for name in self.of(queue)))

    def levels(self, queues: Sequence[str]) -> tuple[int, ...]:
        """The priority level of each of queues (expanded): the shards of a queue share one."""
        order = tuple(queues)
        levels = self._levels.get(order)
        if levels is None:
            groups = itertools.groupby(order, logical_queue)
            levels = tuple(i for i, (_, group) in enumerate(groups) for _ in group)
            self._levels[order] = levels
        return levels

    def _turn(self, queue: str, count: int) -> int:
        """The next shard of queue for this process's enqueues (round robin)."""
        pid = os.getpid()
        turns = self._turns.get((queue, pid))
        if turns is None:  # from a start of this process's own: children forked alike spread
            turns = self._turns[(queue, pid)] = itertools.count(pid % count)
        return next(turns) % count

    def route(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueRequest]:
        """The requests with their queue made a shard of it (see the module): those with an
        idempotency key to its shard, the others of one queue to the next shard, together."""
        picked: dict[str, str] = {}
        out = []
        for request in requests:
            names = self.names.get(request.queue)
            if names is None:
                out.append(request)
                continue
            key = request.idempotency_key
            job = _job_of(request.encoded) if one_shard_jobs else ""
            if job in one_shard_jobs:  # a limited job type: its limits are one shard's keys
                shard = names[shard_index(job, len(names))]
            elif key is not None:  # `<ns>:{<home>}:idem:<job>:<key>`: hashed as QueueKeys does
                shard = names[shard_index(key.partition("}:idem:")[2], len(names))]
            else:
                shard = picked.get(request.queue) or picked.setdefault(
                    request.queue, names[self._turn(request.queue, len(names))]
                )
            out.append(replace(request, queue=shard))
        return out


def merged(infos: Sequence[QueueInfo]) -> list[QueueInfo]:
    """QueueInfos of queues in Redis as one per queue of ours, in order: the counts of its shards
    summed, paused if any shard is (a pause or resume acts on every shard)."""
    out: list[QueueInfo] = []
    for name, group in itertools.groupby(infos, lambda info: logical_queue(info.name)):
        shards = list(group)
        if len(shards) == 1 and shards[0].name == name:
            out.append(shards[0])
            continue
        sums = {count: sum(getattr(info, count) for info in shards) for count in COUNTS}
        out.append(replace(shards[0], name=name, paused=any(i.paused for i in shards), **sums))
    return out


_built: list[tuple[JobsSettings, Shards]] = []


def shards_for(settings: JobsSettings) -> Shards:
    """The Shards of one JOBS setting, built once (the settings object is new when JOBS is:
    the last one is kept)."""
    if not _built or _built[0][0] is not settings:
        _built[:] = [(settings, Shards(settings))]
    return _built[0][1]
