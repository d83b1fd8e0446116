"""Fetching tasks in strict priority order across queues, with one script call per queue.

Every script touches one Redis Cluster slot, and each queue is a slot of its own (`{<queue>}`),
so the dequeue script takes one queue. A fetch over several queues keeps their strict priority
(the first queue is drained before the second is looked at) by a guess and a check:

- it dequeues from one queue, the *lead*: the one this process last took a task from (at first
  the first queue), and in the same round trip reads whether each other queue has a task ready
  (`EXISTS paused`, `LLEN pending`: two cheap commands per queue, no script);
- if the lead gave tasks and no queue before it had one ready, they are the ones the queues'
  order asks for: done, in one round trip, as the single-queue fetch;
- if a queue before the lead had a task ready, the tasks taken are handed back at once, oldest
  first as they were (requeue: no attempt spent), and the first ready queue becomes the lead;
- if the lead gave nothing, the first ready queue becomes the lead, and the fetch goes on.

So a fetch costs one round trip while the work stays on one queue, two when it moves to another
(measured: tests/integration/test_fetch_rounds.py, quoted in docs/scale-redis.rst), and the
ack of the task before rides along (`ack_dequeue`, one script call, when its queue is the lead).
On a Cluster the commands of a round trip go to every node at once (cluster.ClusterWire): still
one round trip of latency. With one queue, a fetch is the single dequeue call it always was.

The lead is kept per list of queues, in this process (a worker child's own fetches).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from django_jobs.broker.connection import ScriptCalls
from django_jobs.broker.protocol import Delivery

#: Why a task taken out of the queues' order goes back (its requeue's reason, never shown: it
#: goes back to pending, not to dead).
HANDED_BACK = "a queue before its own had a task ready"

#: Seconds a queue whose keys have another type is left out of the ready checks (then its
#: dequeue is tried again, and warns again only about keys not warned about yet).
BROKEN_PAUSE = 5.0

Call = tuple[str, list[str], list[Any]]


class FetchCalls(ScriptCalls):
    """The fetch of RedisBroker (see the module); the dequeue script's keys and replies are
    RedisBroker's (`_dequeue_call`, `_deliveries`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The lead queue's index, per list of queues (see the module).
        self._leads: dict[tuple[str, ...], int] = {}
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

    def _command(self, call: Call) -> tuple[Any, ...]:
        name, keys, args = call
        return ("EVALSHA", self.scripts[name].sha, len(keys), *keys, *args)

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
        """Run `lead` commands and `before` script calls, then fetch up to count tasks.

        `first`: the lead queue's index to start from (an idle wait woken by that queue).
        Returns the replies of `lead` then `before` (bytes, errors as values), the tasks
        fetched, and the error of a dequeue refused (then the tasks fetched before it).
        """
        order = tuple(queues)
        at = self._leads.get(order, 0) if first is None else first
        now = time.monotonic()
        broken = {i for i, q in enumerate(queues) if self._broken_until.get(q, 0.0) > now}
        if at in broken and len(broken) < len(queues):
            at = min(set(range(len(queues))) - broken)
        pre = [*lead, *(self._command(call) for call in before)]
        names: list[str | None] = [None] * len(lead) + [call[0] for call in before]
        # The ack of the task before, and the dequeue of its own queue: one script call.
        ack = before[-1] if before and before[-1][0] == "ack" else None
        got: list[Delivery] = []
        back: list[Delivery] = []
        replies_before: list[Any] = []
        left = count
        for round_ in range(len(queues) + 1):
            commands, calls = list(pre), list(names)
            merged = ack is not None and ack[1][1] == self.keys(queues[at]).active
            if merged:
                commands.pop()
                calls.pop()
            for delivery in back:
                commands.append(self._command(self._requeue_call(delivery, False, HANDED_BACK)))
                calls.append("requeue")
            others = [i for i in range(len(queues)) if i != at and i not in broken]
            for i in others:
                k = self.keys(queues[i])
                commands += [("EXISTS", k.paused), ("LLEN", k.pending)]
                calls += [None, None]
            keys, args = self._dequeue_call([queues[at]], left)
            if merged:
                assert ack is not None
                # (its guard key left out: the dequeue's `paused` is one, see keys.py)
                call = ("ack_dequeue", [*ack[1][:5], *keys], [*ack[2], *args])
            else:
                call = ("dequeue", keys, args)
            commands.append(self._command(call))
            calls.append(call[0])
            sent = self._round_trip(commands, own=own, replayable=False)
            replies = self._reload(commands, calls, sent)
            fetched = replies[-1]
            checks = replies[len(commands) - 1 - 2 * len(others) : len(commands) - 1]
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
                return replies_before, got, fetched
            taken = self._deliveries([queues[at]], fetched)
            if not taken and len(fetched) % 9:  # a key of another type: skip it a while
                self._broken_until[queues[at]] = now + BROKEN_PAUSE
                broken.add(at)
            ready = [
                i
                for n, i in enumerate(others)
                if checks[2 * n] == 0 and isinstance(checks[2 * n + 1], int) and checks[2 * n + 1]
            ]
            if taken and ready and ready[0] < at and round_ < len(queues):
                back, at = taken, ready[0]  # out of order: hand them back, take the first's
                continue
            got += taken
            left -= len(taken)
            ahead = [i for i in ready if i > at or not taken]
            if not left or not ahead:
                break
            at = ahead[0]
        self._leads[order] = at
        return replies_before, got, None

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
