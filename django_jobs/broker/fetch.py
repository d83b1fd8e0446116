"""Fetching tasks in strict priority order across queues, with one script call per queue.

Every script touches one Redis Cluster slot, and each queue is a slot of its own (`{<queue>}`),
so the dequeue script takes one queue. A fetch over several queues keeps their strict priority
(the first queue is drained before the second is looked at) by a guess and a check:

- it dequeues from one queue, the *lead*: the one this process last took a task from (at first
  the first queue), and in the same round trip reads whether each queue before the lead has a
  task ready (one `EXISTS` per queue, no script: see `RedisBroker._checks`);
- if the lead gave tasks and no queue before it had one ready, they are the ones the queues'
  order asks for: done, in one round trip, as the single-queue fetch;
- if a queue before the lead had a task ready, the tasks taken are handed back at once, oldest
  first as they were (requeue: no attempt spent), and the first ready queue becomes the lead;
- if the lead gave nothing, the next round trip dequeues from the next queue and reads every
  other queue; from then on the first ready queue leads, until none is.

So a fetch costs one round trip while the work stays on one queue, two when it moves to another
or when the last task is gone (measured: tests/integration/test_fetch_rounds.py, quoted in
docs/scale-redis.rst), and the ack of the task before rides along (`ack_dequeue`, one script
call, when its queue is the lead).
On a Cluster the commands of a round trip go to every node at once (cluster.ClusterWire): still
one round trip of latency. With one queue, a fetch is the single dequeue call it always was.

A sharded queue's shards (shards.py) share its place in that order, none before another: the
first round trip checks the queues before the sharded one only, and after each fetch the lead
moves to the queue's next shard (`_next_lead`; the queue keeps its turn while another leads),
so every shard with work is taken from in turn. The cost is the same: one round trip while the
next shard has work, two when it is empty or the last task is gone (measured:
tests/integration/test_shards.py); the ack of the task before rides in that round trip as a
script call of its own (its shard is another slot than the next one).

The first round trip is RedisBroker's (`_fetch_several`, in redis.py, beside the fetch of one
queue: the code a task runs through), and so is the fetch when it settles there; the rounds
after it are this module's (`_fetch_rounds`), as are a fetch's hand-backs when it fails, the
warnings about keys of another type, and the one-off fetches (`dequeue`, `dequeue_many`:
Processor.process_one). The lead is kept per list of queues, in this process (a worker child's
own fetches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

from django_jobs.broker.cluster import PartlyAnswered
from django_jobs.broker.connection import ScriptCalls, refused, wrong_key
from django_jobs.broker.protocol import Delivery
from django_jobs.exceptions import BrokerRefused
from django_jobs.keys import queue_label

#: Why a task taken out of the queues' order goes back (its requeue's reason, never shown: it
#: goes back to pending, not to dead).
HANDED_BACK = "a queue before its own had a task ready"

#: Why a task a fetch took goes back when the fetch fails after taking it (a later round trip
#: lost, or a dequeue refused): the caller gets the error, not the task.
FETCH_FAILED = "its fetch failed after taking it"

logger = logging.getLogger("django_jobs.broker")

#: Seconds a queue whose keys have another type is left out of the ready checks (then its
#: dequeue is tried again, and warns again only about keys not warned about yet).
BROKEN_PAUSE = 5.0

Call = tuple[str, list[str], list[Any]]
#: What `EXISTS paused pending pending` answers for a queue with a task ready (see
#: RedisBroker._checks, in redis.py).
READY = 2


def _time(name: str, value: bytes) -> tuple[float | None, str]:
    """A time field of a task record, and the problem with it ("" when there is none)."""
    if not value:
        return None, ""
    try:
        return float(value), ""
    except ValueError:
        return None, f"{name} is not a number: {value.decode(errors='replace')!r}"


def times(enqueued: bytes, unknown: bytes) -> tuple[float | None, float | None, str]:
    """A delivery's enqueued_at and first_unknown_at when one is not a number, and the problem
    (RedisBroker._deliveries reads the common case inline)."""
    enqueued_at, problem = _time("enqueued_at", enqueued)
    first_unknown_at, unknown_problem = _time("first_unknown_at", unknown)
    return enqueued_at, first_unknown_at, problem or unknown_problem


class FetchCalls(ScriptCalls):
    """The fetch of RedisBroker off its hot path (see the module); the dequeue script's keys
    and replies, and the first round trip, are RedisBroker's (`_dequeue_call`, `_deliveries`,
    `_fetch_several`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The lead queue's index, per list of queues (see the module).
        self._leads: dict[tuple[str, ...], int] = {}
        #: (queues, lead, every queue or those before it) -> _checks' answer (no broken queue).
        self._plans: dict[tuple[tuple[str, ...], int, bool], tuple[list[int], list[Any]]] = {}
        #: Queues whose dequeue found a key of another type, and until when (monotonic) their
        #: pending tasks are not taken as ready: they are skipped, as the dequeue script
        #: skips them, instead of handing back other queues' tasks for them on every fetch.
        self._broken_until: dict[str, float] = {}
        #: Per list of queues, each sharded queue's (by level) next shard to lead (_next_lead).
        self._turns: dict[tuple[str, ...], dict[int, int]] = {}
        #: Keys of another type than ours that dequeue reported last, each warned about once.
        self._broken: frozenset[str] = frozenset()

    #: RedisBroker.fetch (the hot path, redis.py): (the lead commands' replies, the tasks
    #: taken, the error that ended the fetch if one did).
    fetch: Callable[..., tuple[list[Any], list[Delivery], Exception | None]]

    def _dequeue_call(self, queues: Sequence[str], count: int) -> tuple[list[str], list[Any]]:
        raise NotImplementedError

    def _deliveries(self, queues: Sequence[str], flat: Sequence[Any]) -> list[Delivery]:
        raise NotImplementedError

    def _checks(
        self, order: tuple[str, ...], at: int, full: bool, broken: set[int]
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        raise NotImplementedError

    def _requeue_call(self, delivery: Delivery, crash: bool, reason: str) -> Call:
        raise NotImplementedError

    def dequeue(self, queues: Sequence[str]) -> Delivery | None:
        """Move the oldest pending task of the first non-empty, unpaused queue to active."""
        deliveries = self.dequeue_many(queues, 1)
        return deliveries[0] if deliveries else None

    def dequeue_many(self, queues: Sequence[str], count: int) -> list[Delivery]:
        """Move up to count pending tasks to active, queues in strict priority order (one
        dequeue call per queue: see the module)."""
        with self.unavailable():
            _, deliveries, failed = self.fetch(queues, count, own=False)
            if failed is not None:
                raise failed
        return deliveries

    def _fetch_rounds(
        self,
        order: tuple[str, ...],
        count: int,
        at: int,
        broken: set[int],
        opening: tuple[list[int], list[Any], Any, list[Delivery]],
        own: bool,
    ) -> tuple[list[Delivery], Exception | None]:
        """A fetch of several queues from its first round trip on, when that did not settle it
        (see the module). `opening` is what the first round trip found: the queues it looked
        at, their checks' replies, and the reply of the lead `at`'s dequeue and its tasks.
        Returns the tasks fetched and the error of a dequeue refused (then no task: any taken
        are handed back)."""
        others, answers, fetched, taken = opening
        got: list[Delivery] = []
        back: list[Delivery] = []
        stuck: list[Delivery] = []  # hand-backs refused: given back again at the end
        left = count
        for round_ in range(len(order) + 2):
            # The first round looked at the queues before the lead only (what the queues'
            # order asks about the tasks it takes); the next ones at every queue (where to go).
            full = round_ > 0
            if full:
                commands: list[tuple[Any, ...]] = []
                calls: list[str | None] = []
                for delivery in back:
                    commands.append(self._command(self._requeue_call(delivery, False, HANDED_BACK)))
                    calls.append("requeue")
                others, checks = self._checks(order, at, full, broken)
                commands += checks
                calls += [None] * len(checks)
                keys, args = self._dequeue_call([order[at]], left)
                commands.append(self._command(("dequeue", keys, args)))
                calls.append("dequeue")
                try:
                    replies = self._send(commands, calls, own=own)
                except BaseException as exc:
                    # Tasks taken by a round before (or handed back in this one, which may not
                    # have run), or by this round's dequeue if its node answered, must not wait
                    # in active for their lease to expire.
                    answered = self._answered(exc, order[at], False)
                    self.hand_back([*got, *back, *stuck, *answered], FETCH_FAILED)
                    raise
                if back:  # a hand-back refused leaves its task in active: it is tried again
                    stuck += [d for d, r in zip(back, replies) if isinstance(r, Exception)]  # noqa: B905
                fetched = replies[-1]
                answers = replies[len(commands) - 1 - len(others) : len(commands) - 1]
                back = []
                if isinstance(fetched, Exception):
                    self.hand_back([*got, *stuck], FETCH_FAILED)
                    return [], fetched
                taken = self._deliveries([order[at]], fetched)
            if not taken and len(fetched) % 9:  # a key of another type: skip it a while
                self._broken_until[order[at]] = time.monotonic() + BROKEN_PAUSE
                broken.add(at)
            # In the queues' order from the lead: the shards of a queue share its place, the
            # lead's next shards first (broker/shards.py); without shards, by index.
            rank = self._ranks(order, at)
            ready = sorted((i for i, a in zip(others, answers, strict=True) if a == READY),
                           key=rank.__getitem__)  # fmt: skip
            if taken and ready and rank[ready[0]] < rank[at] and round_ <= len(order):
                back, at = taken, ready[0]  # out of order: hand them back, take the first's
                continue
            got += taken
            left -= len(taken)
            if taken:  # the queue this process last took a task from; of a sharded one, the next
                self._leads[order] = self._next_lead(order, at) if self.shards.names else at
            if not left:
                break
            ahead = [i for i in ready if rank[i] > rank[at] or not taken]
            later = sorted((i for i in range(len(order)) if rank[i] > rank[at] and i not in broken),
                           key=rank.__getitem__)  # fmt: skip
            if ahead:
                at = ahead[0]
            elif full or not later:
                break  # every queue seen: none has a task ready
            else:
                at = later[0]  # the queues after the lead were not looked at: the next leads
        self.hand_back(stuck, HANDED_BACK)
        return got, None

    def _ranks(self, order: tuple[str, ...], at: int) -> list[tuple[int, int]]:
        """Each queue's place in the fetch's order from the lead `at`: its level (a sharded
        queue's shards share one: shards.py), then how far after the lead it is (cyclic)."""
        level = self.shards.levels(order) if self.shards.names else range(len(order))
        n, turns = len(order), self._turns.get(order, {})
        # A level's first is the lead, or the shard its queue's turn has come to (its next).
        firsts = {level[i]: turns.get(level[i], i) for i in range(n - 1, -1, -1)}
        firsts[level[at]] = at
        return [(level[i], (i - firsts[level[i]]) % n) for i in range(n)]

    def _next_lead(self, order: tuple[str, ...], at: int) -> int:
        """The lead after a fetch that took from `at`: the next shard of its queue (cyclic), so
        that each fetch starts at another and every shard with work is taken from in turn; the
        queue keeps its turn while another queue leads (`_ranks`)."""
        level = self.shards.levels(order)
        same = [i for i in range(len(order)) if level[i] == level[at]]
        after = same[(same.index(at) + 1) % len(same)]
        self._turns.setdefault(order, {})[level[at]] = after
        return after

    def hand_back(self, deliveries: Sequence[Delivery], reason: str) -> int:
        """Put tasks this process took but will not run back in pending (requeue: no attempt,
        no crash spent), in one round trip on a pool connection; returns how many went back.

        Never raises a Redis error: a task it cannot give back is logged, and is recovered
        once its lease expires (as a crash: that is what the hand-back spares it).
        """
        if not deliveries:
            return 0
        calls = [self._requeue_call(delivery, False, reason) for delivery in deliveries]
        try:
            replies = self._pipeline(calls, errors=True)
        except redis.RedisError as exc:
            replies = [exc] * len(calls)
        back = 0
        for delivery, reply in zip(deliveries, replies, strict=True):
            if isinstance(reply, Exception):
                logger.warning(
                    "could not give back task %s of queue %s (%s): %s; it is recovered once "
                    "its lease expires",
                    delivery.id, queue_label(delivery.queue), reason, reply,
                )  # fmt: skip
            else:
                back += bool(reply)  # 0: stale, the task is no longer this fetch's
        return back

    def _answered(self, exc: BaseException, queue: str, merged: bool) -> list[Delivery]:
        """The tasks a round trip's dequeue (its last command) took when the round trip raised
        but the dequeue's node answered: on a Cluster, another node failed (PartlyAnswered)."""
        if not isinstance(exc, PartlyAnswered) or not exc.replies:
            return []
        reply = exc.replies[-1]
        if merged and isinstance(reply, list) and len(reply) == 2:  # ack_dequeue: {ack, tasks}
            reply = reply[1]
        return self._deliveries([queue], reply) if isinstance(reply, list) else []

    def _broken_now(self, queues: Sequence[str]) -> set[int]:
        """The queues (by index) left out of the ready checks for now (see BROKEN_PAUSE). Those
        whose pause has passed are forgotten: a healed queue's fetch then costs nothing here."""
        now = time.monotonic()
        for queue, until in list(self._broken_until.items()):
            if until <= now:
                self._broken_until.pop(queue, None)
        return {i for i, q in enumerate(queues) if q in self._broken_until}

    def _warn_broken(self, entries: Sequence[bytes]) -> None:
        """Log once per key what dequeue found of another type (see dequeue.lua)."""
        broken = frozenset(entry.decode(errors="replace") for entry in entries)
        for entry in sorted(broken - self._broken):
            kind, expected, key = entry.split(" ", 2)
            if expected == "hash":
                logger.warning(
                    "Redis key %r was a %s, not a task record (hash): it is not one of ours, so "
                    "its task cannot run; the task is now dead with that error (see the admin).",
                    key, kind,
                )  # fmt: skip
            else:
                logger.warning(
                    "%s The queue is skipped until then: its tasks wait, other queues are served.",
                    wrong_key(key, kind, expected),
                )
        self._broken |= broken

    def _mend_broken(self, queues: Sequence[str]) -> None:
        """Forget the keys of another type of queues whose dequeue found none (a fetch is per
        queue): they are sound again, and are warned about again if they break again."""
        tags = [f"{{{queue}}}" for queue in queues]
        self._broken = frozenset(e for e in self._broken if not any(t in e for t in tags))

    def _wrong_wake_key(self, queues: Sequence[str], error: ResponseError) -> BrokerRefused:
        """Name the wake key BLPOP failed on (the error does not), as BrokerRefused."""
        wakes = [self.keys(queue).wake for queue in queues]
        with self.unavailable(writes=False):
            kinds = [str(self.client.type(key)) for key in wakes]
        for key, kind in zip(wakes, kinds, strict=True):
            if kind not in ("none", "list"):
                return wrong_key(key, kind, "list", outcome="no task was taken")
        return refused(self.url, error, outcome="no task was taken")
