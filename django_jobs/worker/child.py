"""A worker child: fetch a task, run it, write its outcome with the next fetch; repeat.

Each child talks to Redis for itself: writing one task's outcome and fetching the next is one
round trip (`RedisBroker.settle`), and a child fetches only when it is free, so no task waits
behind a busy child and strict priority holds. What it runs is written to the shared slot
table, so the supervisor can renew its lease and put the task back if the child dies.

An idle child blocks on Redis for a wake-up token and fetches in the same round trip
(`RedisBroker.wait_and_fetch`): a job enqueued into an idle worker starts after one round trip.

The handler runs on the child's main thread, so the task timeout is a SIGALRM that raises
JobTimeout inside it. A handler that does not return to Python in time (C code holding the GIL,
a handler that swallows JobTimeout) is killed by the supervisor after a grace period. A run whose
lease the supervisor found lost gets LeaseLost the same way (SIGUSR1), and nothing is written.
So does a run whose task was canceled, with JobCanceled, on the same signal (`interruption` says
which: the slot table's marks); it ends canceled however the handler ends (`_end_canceled`).

A child dies with its supervisor: on Linux the kernel kills it (a parent-death signal); where
the kernel cannot, it checks its parent before each fetch and before it starts a task, so an
orphan never starts one (a task fetched as the supervisor died goes back untouched).

While Redis does not answer, a child logs one line, retries after a bounded jittered back-off,
and logs one line when Redis answers again.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import resource
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from django_jobs.broker.protocol import Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable, JobCanceled, JobTimeout, LeaseLost
from django_jobs.worker.loop import Backoff, Outage
from django_jobs.worker.policy import Attempt
from django_jobs.worker.processor import Processor, log_outcome
from django_jobs.worker.slots import MAX_ID, Running, SlotTable

logger = logging.getLogger("django_jobs.worker.child")

#: Seconds a free child blocks on Redis for a wake-up token before it fetches anyway (a resumed
#: queue, tokens lost with a Redis restart: every other way into pending pushes a token).
WAIT = 5.0
#: The signal by which the supervisor tells a child that its run lost its lease.
LOST_SIGNAL = signal.SIGUSR1
#: Seconds between two looks at the slot table while a stale run of the same task ends.
STALE_POLL = 0.005
#: prctl(2) option: the signal this process gets when the thread that forked it exits.
PR_SET_PDEATHSIG = 1
#: libc, loaded in the supervisor (before any fork) on Linux; None elsewhere.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

try:
    # The handler as installed, without signal.getsignal's conversion to the Handlers enum,
    # which raises and catches a ValueError for every Python handler: 1 to 3 us, once per task.
    from _signal import getsignal as _installed_handler  # type: ignore[import-not-found]
except ImportError:  # not CPython
    _installed_handler = signal.getsignal


def set_parent_death_signal(signum: int) -> bool:
    """Have the kernel send signum to this process when the thread that forked it exits, which
    is when its parent dies: the supervisor forks on its main thread. Return whether the kernel
    took it (Linux; elsewhere, a no-op: False)."""
    return _LIBC is not None and _LIBC.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def die_with_parent(parent: int) -> tuple[bool, bool]:
    """Have the kernel SIGKILL this process when its parent dies; return whether the parent is
    still `parent` (it may have died before the kernel was told), and whether the kernel took it
    (then the child need not look at its parent before each task)."""
    watched = set_parent_death_signal(signal.SIGKILL)
    return os.getppid() == parent, watched


def _memory_mib() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Child:
    """The loop of one child process (slot `index` of the supervisor's table)."""

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str],
        table: SlotTable,
        index: int,
        parent: int | None = None,
        *,
        watched: bool = False,
    ) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.queues = tuple(queues)
        self.table = table
        self.index = index
        #: The supervisor's pid: a different parent means it died and this child is an orphan.
        self.parent = os.getppid() if parent is None else parent
        #: The kernel kills this process with its parent (see `die_with_parent`): no per-task
        #: look at the parent is needed.
        self.watched = watched
        self.orphaned = False
        self.processor = Processor(broker, queues, guard=self._guard)
        self.backoff = Backoff()
        self.outage = Outage(logger, f"worker child {os.getpid()}")
        self.current: Delivery | None = None
        self.stopping = False
        self.waiting = False
        self.done = 0
        #: The running task's timeout while its alarm is armed, else 0 (a late alarm is ignored).
        self.armed = 0.0
        #: The timeout `_guard` was given, armed by `__enter__`.
        self._timeout = 0.0
        self._alarm_handler = self._on_alarm  # one bound method, to compare by identity
        #: The run LeaseLost was raised in (id, epoch): raised once per run.
        self._interrupted: tuple[str, str] | None = None
        #: The run JobCanceled was raised in (id, epoch): raised once per run.
        self._canceled: tuple[str, str] | None = None
        #: LOST_SIGNAL came while no handler was armed (the supervisor sends it once): looked
        #: at again as the next handler is armed.
        self._missed = False

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        # From the supervisor: finish the task at hand (if any), write it, and exit.
        self.stopping = True
        if self.waiting:
            self.broker.interrupt_wait()

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            raise JobTimeout(f"timed out after {self.armed:g} s")

    def _on_lost(self, signum: int, frame: FrameType | None) -> None:
        # From the supervisor, after it marked the run lost or canceled: interrupt only that run.
        if not self.armed:
            self._missed = True
            return
        error = self.interruption()
        if error is not None:
            raise error

    def interruption(self) -> LeaseLost | JobCanceled | None:
        """What LOST_SIGNAL asks of the running handler, to raise in it: LeaseLost when the
        supervisor marked this run lost, else JobCanceled when it marked it canceled; each once
        per run (a second one would cut its except and finally blocks short), and None for a run
        not marked (the child moved on) or once raised. A runner of async handlers calls this on
        the signal too, and raises the answer into the coroutine (then `_end_canceled` holds)."""
        task = self.current
        if not (self.armed and task):
            return None
        run = (task.id, task.epoch)
        if self._interrupted == run:
            return None
        if self.table.is_lost(self.index, task.id, task.epoch):
            self._interrupted = run
            return LeaseLost(f"task {task.id} lost its lease: run interrupted")
        if self._canceled != run and self.table.is_canceled(self.index, task.id, task.epoch):
            self._canceled = run
            return JobCanceled(f"task {task.id} was canceled: run interrupted")
        return None

    def _end_canceled(self, kind: type[BaseException] | None) -> None:
        """A run JobCanceled was raised in ends canceled, however its handler ended (it
        returned, or raised something else): raise JobCanceled out of it for the policy. Not
        when its lease was lost since: then nothing is written."""
        task, run = self.current, self._canceled
        self._canceled = None
        if task is None or run != (task.id, task.epoch) or self._interrupted == run:
            return
        if kind is None or not issubclass(kind, JobCanceled | LeaseLost):
            how = "returned" if kind is None else f"raised {kind.__name__}"
            raise JobCanceled(f"task {task.id} was canceled while it ran (its handler {how})")

    def _orphaned(self) -> bool:
        """Whether the supervisor died (this process was handed to another parent)."""
        if os.getppid() == self.parent:
            return False
        if not self.orphaned:
            self.orphaned = True
            logger.warning(
                "worker child %d: its supervisor %d died; exiting", os.getpid(), self.parent
            )
        return True

    def _install_signals(self) -> None:
        # Ctrl-C reaches the whole process group: the supervisor decides, not the child.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_term)
        # Installed once: each task only arms and disarms the timer (see `_guard`).
        signal.signal(signal.SIGALRM, self._alarm_handler)
        signal.signal(LOST_SIGNAL, self._on_lost)
        # The supervisor forked us with these blocked; one sent meanwhile is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    def run(self) -> None:
        self._install_signals()
        verdict: Verdict | None = None
        maybe_work = True
        while True:
            orphaned = not self.watched and self._orphaned()
            fetch = maybe_work and not self.stopping and not self._retiring() and not orphaned
            if verdict is None and not fetch:
                if self.stopping or self._retiring() or orphaned:
                    self._give_back_unsure(self.broker)
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
                self.outage.failed(exc)
                self._pause(self.backoff.next())
                continue
            if self.backoff.failures:
                self._answered()
            if verdict is not None:
                log_outcome(verdict, written[0])
                self.table.clear(self.index)
                verdict = None
            if fetch and not deliveries:
                maybe_work = False
            if deliveries:
                verdict = self._run(deliveries[0])

    def _answered(self) -> None:
        self.outage.answered()
        self.backoff.reset()

    def _run(self, delivery: Delivery) -> Verdict | None:
        """Run a fetched task; None if nothing is to be written (its lease was lost, or this
        child is an orphan and handed it back untouched)."""
        if not self.watched and self._orphaned():
            self._hand_back(delivery, "its worker's supervisor died")
            self.stopping = True
            return None
        self.current = delivery
        self.done += 1
        verdict = self.processor.decide(delivery)
        if verdict is None:  # lost its lease: nothing to write, nothing to renew
            self.table.clear(self.index)
        return verdict

    def _guard(self, timeout: float, attempt: Attempt) -> Child:
        """Around the handler: publish the task in the slot table, and raise JobTimeout in it
        (on this, the main thread) if it runs longer than timeout seconds (the child is the
        context manager: no generator per task on the hot path)."""
        delivery = self.current
        if delivery is not None and len(delivery.id) <= MAX_ID:
            queue_index = self.queues.index(delivery.queue)
            running = Running(
                delivery.id, queue_index, delivery.epoch, time.monotonic(), timeout,
                attempt.number, attempt.max_attempts, attempt.backoff,
            )  # fmt: skip
            self.table.set(self.index, running)
            # A first delivery (epoch 1) has no earlier run that could still be running.
            if delivery.epoch != "1" and self._wait_for_stale_run(delivery):
                # Its timeout starts now, with its alarm, not while it waited.
                self.table.set(self.index, dataclasses.replace(running, started=time.monotonic()))
        if _installed_handler(signal.SIGALRM) is not self._alarm_handler:
            # A job replaced it and did not put it back: timeouts must still work.
            signal.signal(signal.SIGALRM, self._alarm_handler)
        self._timeout = timeout
        return self

    def __enter__(self) -> None:
        self.armed = self._timeout
        if self._missed:  # signalled before it was armed (waiting for a stale run, say)
            self._missed = False
            error = self.interruption()
            if error is not None:
                self.armed = 0.0
                raise error
        signal.setitimer(signal.ITIMER_REAL, self._timeout)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        try:
            if kind is None:
                try:  # the body completed: from here a late alarm is ignored
                    self.armed = 0.0
                except JobTimeout:
                    self.armed = 0.0  # the alarm rang as the body returned: it completed in time
        finally:
            self.armed = 0.0
            signal.setitimer(signal.ITIMER_REAL, 0)
        if self._canceled is not None:
            self._end_canceled(kind)

    def _wait_for_stale_run(self, delivery: Delivery) -> bool:
        """Start no run of a task that another child of this worker still runs.

        That other run is stale: this delivery's epoch is newer, so the task was recovered (its
        lease expired during a Redis outage or a freeze) and handed out again, to this worker.
        The supervisor interrupts the stale run within a tick (and kills its child after the
        grace); until its slot is free this run waits, its own lease renewed from the slot
        table. If this run's lease is lost meanwhile too, it never starts.
        """
        waited = False
        while self._stale(self.index, delivery):
            time.sleep(STALE_POLL)
            waited = True
        return waited

    def _stale(self, index: int, delivery: Delivery) -> bool:
        """Whether a slot other than index still runs the task; LeaseLost if the run of slot
        index lost its lease meanwhile."""
        if not self.table.held_elsewhere(index, delivery.id):
            return False
        if self.table.is_lost(index, delivery.id, delivery.epoch):
            raise LeaseLost(f"task {delivery.id} lost its lease before its run could start")
        return True

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
            self.outage.failed(exc)
            self._pause(self.backoff.next())
            return []
        finally:
            self.waiting = False
        self._answered()
        if deliveries and self.stopping:
            for delivery in deliveries:
                self._hand_back(delivery, "stopping")
            return []
        return deliveries

    def _hand_back(self, delivery: Delivery, why: str) -> None:
        """Put a fetched task that was not started back in pending, no attempt or crash spent."""
        try:
            self.broker.requeue(delivery, crash=False, reason=why)
        except BrokerUnavailable:
            logger.warning(
                "could not hand back task %s (%s): it runs again once its lease expires",
                delivery.id, why,
            )  # fmt: skip

    def _give_back_unsure(self, broker: RedisBroker) -> None:
        """As the child exits, give back what a fetch whose reply was lost took (an interrupted
        wait, a timeout: broker/receipts.py), or it would wait in active until its lease expires."""
        try:
            broker.give_back_unsure()
        except BrokerUnavailable:
            logger.warning("could not give back what a fetch whose reply was lost took: it runs "
                           "again once its lease expires")  # fmt: skip

    def _pause(self, seconds: float) -> None:
        # Not a "waiting" pause: a SIGTERM here must not drop an outcome still to be written.
        if not self.stopping:
            time.sleep(seconds)


def main(
    broker: RedisBroker, queues: Sequence[str], table: SlotTable, index: int, parent: int
) -> None:
    """Run a child until it is told to stop, retires, or its supervisor `parent` dies."""
    alive, watched = die_with_parent(parent)
    if not alive:
        return  # the supervisor died before the kernel could be told: an orphan already
    Child(broker, queues, table, index, parent, watched=watched).run()
