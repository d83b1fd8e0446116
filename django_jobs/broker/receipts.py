"""Fetch receipts: a dequeue whose reply was lost strands nothing.

A dequeue moves tasks to active before its reply leaves Redis. When the connection fails or
times out after the call was sent, the caller cannot tell whether it ran, and a dequeue is
never sent twice (connection.NOT_REPLAYABLE: a replay would take more tasks). Without more,
the tasks it took would wait in active until their lease expired, and then be counted as a
crash by the recoverer.

So every dequeue call carries a receipt of this process's own (a random token, new in each
forked process, and a counter), which dequeue.lua writes in each record it hands out
(`receipt`). A fetch that raised keeps its receipts as *unsure*; the next fetch of this broker
first gives their tasks back, in a round trip of its own (give_back.lua: back to the head of
pending, no attempt or crash spent, the epoch moved on), so that its dequeue takes them again at
once. That costs a round trip more, on the rare path only. A stopping worker child calls
`give_back_unsure` before it exits. A receipt is found by reading the queue's active list: the
cost is on that rare call, none on the hot path but the receipt's bytes in the dequeue's HSET of
the record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MovedError,
    ResponseError,
    TryAgainError,
)

from django_jobs.broker.fetch import Call, FetchCalls
from django_jobs.keys import queue_label

logger = logging.getLogger("django_jobs.broker")


def _refused(reply: Any) -> bool:
    """Whether a give-back's reply says it did not run and may run later: TRYAGAIN, MOVED,
    ASK, CLUSTERDOWN, LOADING or BUSY."""
    if isinstance(reply, (TryAgainError, MovedError, ClusterDownError, BusyLoadingError)):
        return True
    return isinstance(reply, ResponseError) and str(reply).startswith(_REFUSALS)


_REFUSALS = ("TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "BUSY")


class ReceiptCalls(FetchCalls):
    """The give-back of receipts (see the module). RedisBroker issues them (`_receipt`, an
    argument of its dequeue call) and keeps the unsure ones in its `fetch`, beside the fetch of
    one queue: this code runs only after a fetch whose reply was lost."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._receipt_pid = 0
        self._receipt_token = ""
        self._receipt_count = 0
        #: (queue, receipt) of the dequeue calls of the fetch under way.
        self._issued: list[tuple[str, str]] = []
        #: (queue, receipt) of dequeue calls whose reply was never read.
        self._unsure: list[tuple[str, str]] = []

    def _receipt(self, queue: str) -> str:
        raise NotImplementedError  # RedisBroker's, beside the dequeue call it is sent in

    def _give_back_call(self, queue: str, receipt: str) -> Call:
        k = self.keys(queue)
        return (
            "give_back",
            [k.active, k.lease, k.pending, k.wake, k.guard],
            [k.task_prefix, receipt, self.settings.retention],
        )

    def give_back_unsure(self) -> int:
        """Give back now what the fetches whose reply was lost took (a stopping child's last
        call); returns how many tasks went back. Raises BrokerUnavailable (they are then
        recovered once their lease expires)."""
        if not self._unsure or self._receipt_pid != os.getpid():
            return 0
        with self.unavailable():
            return self._give_back(own=False)

    def _give_back(self, *, own: bool) -> int:
        unsure = self._unsure
        calls = [self._give_back_call(queue, receipt) for queue, receipt in unsure]
        given = self._pipeline(calls, own=own, errors=True)
        # Refused before it ran (a slot moving, a script busy): kept, for the next try.
        self._unsure = [u for u, r in zip(unsure, given, strict=True) if _refused(r)]
        return sum(self._log_given(unsure, given))

    def _log_given(self, unsure: Sequence[tuple[str, str]], given: Sequence[Any]) -> list[int]:
        counts = []
        for (queue, receipt), reply in zip(unsure, given, strict=True):
            if isinstance(reply, Exception):
                logger.warning(
                    "could not give back the tasks of queue %s a fetch took whose reply was "
                    "lost (receipt %s): %s; %s",
                    queue_label(queue), receipt, reply,
                    "tried again before the next fetch" if _refused(reply)
                    else "they run again once their lease expires",
                )  # fmt: skip
                counts.append(0)
            else:
                counts.append(int(reply))
        return counts
