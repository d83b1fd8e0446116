"""Fetching tasks in strict priority order across queues, with one script call per queue.

Every script touches one Redis Cluster slot, and each queue is a slot of its own (`{<queue>}`),
so the dequeue script takes one queue. A fetch over several queues keeps their strict priority
(the first queue is drained before the second is looked at) by a guess and a check:

- it dequeues from one queue, the *lead*: the one this process last took a task from (at first
  the first queue), and in the same round trip reads whether each queue before the lead has a
  task ready (one `EXISTS` per queue, no script: see `_checks`);
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
one round trip of latency. With one queue, a fetch is the single dequeue call it always was,
and none of this module runs: RedisBroker.fetch makes it (`_fetch_one`, in redis.py).

The lead is kept per list of queues, in this process (a worker child's own fetches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from django_jobs.broker.cluster import PartlyAnswered
from django_jobs.broker.connection import ScriptCalls
from django_jobs.broker.protocol import Delivery

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
#: What `EXISTS paused pending pending` answers for a queue with a task ready (see _checks).
READY = 2


class FetchCalls(ScriptCalls):
    """The fetch of RedisBroker (see the module); the dequeue script's keys and replies are
    RedisBroker's (`_dequeue_call`, `_deliveries`)."""

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

    def _dequeue_call(self, queues: Sequence[str], count: int) -> tuple[list[str], list[Any]]:
        raise NotImplementedError

    def _deliveries(self, queues: Sequence[str], flat: Sequence[Any]) -> list[Delivery]:
        raise NotImplementedError

    def _requeue_call(self, delivery: Delivery, crash: bool, reason: str) -> Call:
        raise NotImplementedError

    def fetch(
        self,
        queues: Sequence[str],
        count: int,
        *,
        own: bool,
        before: Sequence[Call] = (),
        lead: Sequence[tuple[Any, ...]] = (),
        first: int | None = None,
    ) -> tuple[list[Any], list[Delivery], Exception | None]:
        """RedisBroker.fetch (its arguments and replies) from several queues (see the module):
        `first` is the lead queue's index to start from (an idle wait woken by that queue)."""
        order = tuple(queues)
        at = self._leads.get(order, 0) if first is None else first
        now = time.monotonic() if self._broken_until else 0.0
        broken = {i for i, q in enumerate(queues) if self._broken_until.get(q, 0.0) > now}
        if broken and at in broken and len(broken) < len(queues):
            at = min(set(range(len(queues))) - broken)
        pre = [*lead, *(self._command(call) for call in before)]
        names: list[str | None] = [None] * len(lead) + [call[0] for call in before]
        # The ack of the task before, and the dequeue of its own queue: one script call.
        ack = before[-1] if before and before[-1][0] == "ack" else None
        got: list[Delivery] = []
        back: list[Delivery] = []
        stuck: list[Delivery] = []  # hand-backs refused: given back again at the end
        replies_before: list[Any] = []
        left = count
        for round_ in range(len(queues) + 2):
            # The first round looks at the queues before the lead only (what the queues' order
            # asks about the tasks it takes); the next ones at every queue (where to go next).
            full = round_ > 0
            commands, calls = list(pre), list(names)
            merged = ack is not None and ack[1][1] == self.keys(queues[at]).active
            if merged:
                commands.pop()
                calls.pop()
            start = len(commands)  # the replies of the hand-backs, then
            for delivery in back:
                commands.append(self._command(self._requeue_call(delivery, False, HANDED_BACK)))
                calls.append("requeue")
            others, checks = self._checks(order, at, full, broken)
            commands += checks
            calls += [None] * len(checks)
            keys, args = self._dequeue_call([queues[at]], left)
            if merged:
                assert ack is not None
                # (its guard key left out: the dequeue's `paused` is one, see keys.py)
                call = ("ack_dequeue", [*ack[1][:5], *keys], [*ack[2], *args])
            else:
                call = ("dequeue", keys, args)
            commands.append(self._command(call))
            calls.append(call[0])
            try:
                replies = self._round_trip(commands, own=own, replayable=False)
                for reply in replies:
                    if isinstance(reply, NoScriptError):
                        replies = self._reload(commands, calls, replies)
                        break
            except BaseException as exc:
                # Tasks taken by a round before (or handed back in this one, which may not
                # have run), or by this round's dequeue if its node answered, must not wait in
                # active for their lease to expire.
                answered = self._answered(exc, queues[at], merged)
                self.hand_back([*got, *back, *stuck, *answered], FETCH_FAILED)
                raise
            if back:  # a hand-back refused leaves its task in active: it is tried again
                stuck += [d for d, r in zip(back, replies[start:]) if isinstance(r, Exception)]  # noqa: B905
            fetched = replies[-1]
            answers = replies[len(commands) - 1 - len(others) : len(commands) - 1]
            if round_ == 0:
                replies_before = replies[: len(pre) - int(merged)]
                if merged:
                    # ack_dequeue answers {ack's reply, dequeue's}, or ack's error (no fetch).
                    acked, fetched = (fetched, []) if isinstance(fetched, Exception) else fetched
                    replies_before.append(acked)
                    if isinstance(acked, Exception):
                        return replies_before, got, None
            pre, names, ack, back = [], [], None, []
            if isinstance(fetched, Exception):
                self.hand_back([*got, *stuck], FETCH_FAILED)
                return replies_before, [], fetched
            taken = self._deliveries([queues[at]], fetched)
            if not taken and len(fetched) % 9:  # a key of another type: skip it a while
                self._broken_until[queues[at]] = time.monotonic() + BROKEN_PAUSE
                broken.add(at)
            ready = [i for i, answer in zip(others, answers, strict=True) if answer == READY]
            if taken and ready and ready[0] < at and round_ <= len(queues):
                back, at = taken, ready[0]  # out of order: hand them back, take the first's
                continue
            got += taken
            left -= len(taken)
            if taken:
                self._leads[order] = at  # the queue this process last took a task from
            if not left:
                break
            ahead = [i for i in ready if i > at or not taken]
            later = [i for i in range(at + 1, len(queues)) if i not in broken]
            if ahead:
                at = ahead[0]
            elif full or not later:
                break  # every queue seen: none has a task ready
            else:
                at = later[0]  # the queues after the lead were not looked at: the next leads
        self.hand_back(stuck, HANDED_BACK)
        return replies_before, got, None

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
                    "could not give back task %s of queue %r (%s): %s; it is recovered once "
                    "its lease expires",
                    delivery.id, delivery.queue, reason, reply,
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

    def _checks(
        self, order: tuple[str, ...], at: int, full: bool, broken: set[int]
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        """The queues a round trip looks at (by index), and the command asking each whether it
        has a task ready: `EXISTS paused pending pending`, READY (2) when its pending list
        exists (Redis deletes an empty one) and it is not paused (one key, one slot each)."""
        plan = None if broken else self._plans.get((order, at, full))
        if plan is None:
            others = [i for i in range(len(order)) if i != at and i not in broken]
            others = [i for i in others if full or i < at]
            checks: list[tuple[Any, ...]] = []
            for i in others:
                k = self.keys(order[i])
                checks.append(("EXISTS", k.paused, k.pending, k.pending))
            plan = (others, checks)
            if not broken:
                self._plans[(order, at, full)] = plan
        return plan

    def _reload(
        self, commands: list[tuple[Any, ...]], names: list[str | None], replies: list[Any]
    ) -> list[Any]:
        """Run again, one by one, the script calls Redis had forgotten the script of (a
        restart, SCRIPT FLUSH: they did not run)."""
        for index, reply in enumerate(replies):
            name = names[index]
            if isinstance(reply, NoScriptError) and name is not None:
                self.client.script_load(self.scripts[name].script)
                (replies[index],) = self._round_trip([commands[index]], own=False, replayable=False)
        return replies
