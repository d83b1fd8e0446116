"""A worker child: fetch a task, run it, write its outcome with the next fetch; repeat.

Each child talks to Redis for itself: writing one task's outcome and fetching the next is one
round trip (`RedisBroker.settle`), and a child fetches only when it is free, so no task waits
behind a busy child and strict priority holds. What it runs is written to the shared slot
table, so the supervisor can renew its lease and put the task back if the child dies.

An idle child blocks on Redis for a wake-up token and fetches in the same round trip
(`RedisBroker.wait_and_fetch`): a job enqueued into an idle worker starts after one round trip.

The handler runs on the child's main thread, so the task timeout is a SIGALRM that raises
JobTimeout inside it. A handler that does not return to Python in time (C code holding the GIL,
a handler that swallows JobTimeout) is killed by the supervisor after a grace period.
"""

from __future__ import annotations

import logging
import resource
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from django_jobs.broker.protocol import Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable, JobTimeout
from django_jobs.worker.processor import Processor, outcome
from django_jobs.worker.slots import MAX_ID, Running, SlotTable

logger = logging.getLogger("django_jobs.worker.child")

#: Seconds a free child blocks on Redis for a wake-up token before it fetches anyway (a resumed
#: queue, tokens lost with a Redis restart: every other way into pending pushes a token).
WAIT = 5.0
#: Seconds between attempts while Redis does not answer.
RETRY = 2.0


def _memory_mib() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Child:
    """The loop of one child process (slot `index` of the supervisor's table)."""

    def __init__(
        self, broker: RedisBroker, queues: Sequence[str], table: SlotTable, index: int
    ) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.queues = tuple(queues)
        self.table = table
        self.index = index
        self.processor = Processor(broker, queues, guard=self._guard)
        self.current: Delivery | None = None
        self.stopping = False
        self.waiting = False
        self.done = 0
        #: The running task's timeout while its alarm is armed, else 0 (a late alarm is ignored).
        self.armed = 0.0
        self._alarm_handler = self._on_alarm  # one bound method, to compare by identity

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        # From the supervisor: finish the task at hand (if any), write it, and exit.
        self.stopping = True
        if self.waiting:
            self.broker.interrupt_wait()

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            raise JobTimeout(f"timed out after {self.armed:g} s")

    def run(self) -> None:
        # Ctrl-C reaches the whole process group: the supervisor decides, not the child.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_term)
        # Installed once: each task only arms and disarms the timer (see `_guard`).
        signal.signal(signal.SIGALRM, self._alarm_handler)
        # The supervisor forked us with these blocked; one sent meanwhile is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        verdict: Verdict | None = None
        maybe_work = True
        while True:
            fetch = maybe_work and not self.stopping and not self._retiring()
            if verdict is None and not fetch:
                if self.stopping or self._retiring():
                    return
                deliveries = self._wait()
                maybe_work = bool(deliveries)
                if deliveries:
                    verdict = self._run(deliveries[0])
                continue
            try:
                written, deliveries = self.broker.settle(
                    [verdict] if verdict else [], self.queues, 1 if fetch else 0
                )
            except BrokerUnavailable as exc:
                logger.warning("%s; trying again in %gs", exc, RETRY)
                self._pause(RETRY)
                continue
            if verdict is not None:
                outcome(verdict, written[0])
                self.table.clear(self.index)
                verdict = None
            if fetch and not deliveries:
                maybe_work = False
            if deliveries:
                verdict = self._run(deliveries[0])

    def _run(self, delivery: Delivery) -> Verdict:
        self.current = delivery
        self.done += 1
        return self.processor.decide(delivery)

    @contextmanager
    def _guard(self, timeout: float) -> Iterator[None]:
        """Around the handler: publish the task in the slot table, and raise JobTimeout in it
        (on this, the main thread) if it runs longer than timeout seconds."""
        delivery = self.current
        if delivery is not None and len(delivery.id) <= MAX_ID:
            queue_index = self.queues.index(delivery.queue)
            running = Running(delivery.id, queue_index, delivery.epoch, time.monotonic(), timeout)
            self.table.set(self.index, running)
        if signal.getsignal(signal.SIGALRM) is not self._alarm_handler:
            # A job replaced it and did not put it back: timeouts must still work.
            signal.signal(signal.SIGALRM, self._alarm_handler)
        self.armed = timeout
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            yield
        finally:
            self.armed = 0.0
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _retiring(self) -> bool:
        limit, ceiling = self.settings.max_tasks_per_child, self.settings.max_memory_per_child
        return bool((limit and self.done >= limit) or (ceiling and _memory_mib() > ceiling))

    def _wait(self) -> list[Delivery]:
        """Block until a wake-up token arrives or WAIT passes, then fetch: one round trip.

        SIGTERM cuts the block short. A task fetched as the stop came is handed back untouched.
        """
        self.waiting = True
        try:
            if self.stopping:
                return []
            deliveries = self.broker.wait_and_fetch(self.queues, WAIT)
        except BrokerUnavailable as exc:
            self.waiting = False
            logger.warning("%s; trying again in %gs", exc, RETRY)
            self._pause(RETRY)
            return []
        finally:
            self.waiting = False
        if deliveries and self.stopping:
            for delivery in deliveries:
                try:
                    self.broker.requeue(delivery, crash=False)
                except BrokerUnavailable:
                    logger.warning(
                        "could not hand back task %s while stopping: it runs again once its "
                        "lease expires", delivery.id,
                    )  # fmt: skip
            return []
        return deliveries

    def _pause(self, seconds: float) -> None:
        # Not a "waiting" pause: a SIGTERM here must not drop an outcome still to be written.
        if not self.stopping:
            time.sleep(seconds)


def main(broker: RedisBroker, queues: Sequence[str], table: SlotTable, index: int) -> None:
    """Run a child until it is told to stop or retires."""
    Child(broker, queues, table, index).run()
