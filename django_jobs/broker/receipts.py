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

from django_jobs.broker.fetch import Call, FetchCalls
from django_jobs.broker.protocol import Delivery

logger = logging.getLogger("django_jobs.broker")


class ReceiptCalls(FetchCalls):
    """`fetch` with receipts (see the module); the dequeue call takes `_receipt` as an
    argument (RedisBroker._dequeue_call)."""

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
        """A new receipt for a dequeue call on queue, noted as the fetch's."""
        pid = os.getpid()
        if pid != self._receipt_pid:  # a forked child: its own token, nothing of its parent's
            self._receipt_pid, self._receipt_token = pid, os.urandom(6).hex()
            self._receipt_count, self._issued, self._unsure = 0, [], []
        self._receipt_count += 1
        receipt = f"{self._receipt_token}.{self._receipt_count}"
        self._issued.append((queue, receipt))
        return receipt

    def _give_back_call(self, queue: str, receipt: str) -> Call:
        k = self.keys(queue)
        return (
            "give_back",
            [k.active, k.lease, k.pending, k.wake, k.guard],
            [k.task_prefix, receipt, self.settings.retention],
        )

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
        """FetchCalls.fetch, after giving back what the fetches whose reply was lost took: in
        a round trip of its own, so that an idle wait's BLPOP comes after it and the wake-up
        tokens the give-back leaves end that wait at once."""
        if self._unsure and self._receipt_pid == os.getpid():
            self._give_back(own=own)  # raises as the fetch would, the receipts kept
        self._issued = []
        try:
            return super().fetch(queues, count, own=own, before=before, lead=lead, first=first)
        except BaseException:
            # Only this fetch's: the receipts before were given back above (so they never pile
            # up through an outage: a fetch that cannot reach Redis issues none).
            self._unsure = self._issued
            raise
        finally:
            self._issued = []

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
        self._unsure = []
        return sum(self._log_given(unsure, given))

    def _log_given(self, unsure: Sequence[tuple[str, str]], given: Sequence[Any]) -> list[int]:
        counts = []
        for (queue, receipt), reply in zip(unsure, given, strict=True):
            if isinstance(reply, Exception):
                logger.warning(
                    "could not give back the tasks of queue %r a fetch took whose reply was "
                    "lost (receipt %s): %s; they run again once their lease expires",
                    queue, receipt, reply,
                )  # fmt: skip
                counts.append(0)
            else:
                counts.append(int(reply))
        return counts
