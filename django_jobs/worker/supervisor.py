"""The supervisor: N forked children, the slot table, and the background loops.

Children fetch and run tasks themselves (see child.py) and record what they run in the shared
slot table. The supervisor reads that table to

- renew the leases of running tasks (the heartbeat, DESIGN.md: not a thread beside the handler);
- put a task back at once when its child dies, without waiting for the lease;
- kill a child stuck past its task's timeout plus a grace period, and retry the task;
- interrupt a run whose lease was lost (LeaseLost in its child, SIGUSR1), kill its child if it
  does not return within the grace, and write nothing for it: the task is another worker's;
- interrupt a run whose task was canceled (JobCanceled, the same signal), kill its child if it
  does not stop within JOBS["CANCEL_GRACE"], and write it canceled (cancels.py);
- stop cleanly: on SIGTERM/SIGINT (or `request_stop`, from the autoreloader's thread) children
  stop fetching and finish their task within the shutdown timeout; the rest are stopped and
  their tasks put back without spending an attempt. A second signal is immediate.

Children die with the supervisor (see child.py): a `kill -9` of it leaves none behind. What
becomes of a run whose child it reaps is the outcome policy's answer (policy.py), written
through the broker; if Redis does not answer then, it is written once Redis answers
(backlog.py). When the heartbeat has failed for longer than the lease (Redis unreachable, or
refusing it), the leases of every running task are gone: the worker stops, exit code HEADLESS,
rather than run on with tasks other workers may be running too.

Start order: signal handlers, the slot table, children (forked before any thread or connection
exists), then the loops (heartbeat first, so leases are renewed from the first second). Stop
order: children, then the registry entry.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from types import FrameType

from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.broker.shards import shards_for
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.keys import logical_queue
from django_jobs.worker import child, children, policy
from django_jobs.worker.backlog import Backlog
from django_jobs.worker.cancels import Cancels
from django_jobs.worker.children import ChildProcess, how_it_ended, signal_all, spawn, stop_all
from django_jobs.worker.forwarder import Forwarder
from django_jobs.worker.heartbeat import Heartbeat
from django_jobs.worker.janitor import Janitor
from django_jobs.worker.loop import Ticker
from django_jobs.worker.policy import Attempt
from django_jobs.worker.processor import write_decision
from django_jobs.worker.recoverer import Recoverer
from django_jobs.worker.relay import Relay
from django_jobs.worker.scheduler import Scheduler
from django_jobs.worker.slots import Running, SlotTable

logger = logging.getLogger("django_jobs.worker.supervisor")

#: Seconds between two looks at the children (deaths, timeouts, signals): bounds how late a
#: dead child's task goes back. Each look is a few system calls, no Redis command.
TICK = 0.05
#: The exit code of a worker that stopped because its heartbeat failed for longer than the
#: lease (EX_TEMPFAIL: a process manager may start it again).
HEADLESS = 75


class Supervisor:
    """Run a worker until it is told to stop (or, in burst mode, until no work is due)."""

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str],
        concurrency: int,
        *,
        burst: bool = False,
        shutdown_timeout: float | None = None,
        async_concurrency: int = 1,
    ) -> None:
        self.broker = broker
        self.settings = broker.settings
        #: The queues served, as the broker has them: a sharded queue's shards (broker/shards.py).
        self.queues = shards_for(self.settings).expand(queues)
        self.concurrency = concurrency
        self.burst = burst
        self.shutdown_timeout = (
            self.settings.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
        )
        #: Slots per child: several make each child an async child (worker/async_child.py).
        self.per_child = async_concurrency
        self.table = SlotTable(concurrency * async_concurrency)
        self.children: list[ChildProcess] = []
        self.exit_code = 0
        #: Whether the background loops have had their first round (the "ready" line).
        self.ready = False
        self.signals = 0
        #: Stop requests not yet acted on: (what, whether a repeat stops at once). Appended by
        #: signal handlers and other threads, taken by the loop.
        self.requests: list[tuple[str, bool]] = []
        self.stop_deadline: float | None = None
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.cancels = Cancels(self.table, self.settings.cancel_grace)
        self.heartbeat = Heartbeat(
            broker, self.worker_id, self.info(), self.running, on_lost=self._lease_lost,
            on_cancel=lambda delivery: self.cancels.request(self.children, delivery),
        )  # fmt: skip
        self.backlog = Backlog(broker)
        self.relay = Relay(broker, self.worker_id)
        self.ticker = Ticker(
            [
                self.heartbeat,
                Forwarder(broker, self.queues),
                Recoverer(broker, self.queues, renew=self.heartbeat.renew),
                Janitor(broker, self.queues),
                Scheduler(broker),
                self.relay,
                self.backlog,
            ]
        )

    def info(self) -> dict[str, str | int | float]:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": ",".join(dict.fromkeys(map(logical_queue, self.queues))),
            # Tasks at once, as the admin and the API show it beside the tasks it runs.
            "concurrency": self.table.size,
            "async_concurrency": self.per_child,
            "started": time.time(),
        }

    def running(self) -> list[Delivery]:
        """The tasks the children run now, as deliveries (for leases and the registry)."""
        tasks = (self.table.get(index) for index in range(self.table.size))
        return [self._delivery(task) for task in tasks if task is not None]

    def _delivery(self, task: Running) -> Delivery:
        return Delivery(
            id=task.task_id,
            queue=self.queues[task.queue_index],
            raw=b"",
            attempts=0,
            crashes=0,
            epoch=task.epoch,
            enqueued_at=None,
            first_unknown_at=None,
            lease_deadline=0.0,
        )

    # -- lifecycle --------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; return the exit code (0 on a clean stop)."""
        if threading.current_thread() is threading.main_thread():  # not under --autoreload
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        for first in range(0, self.table.size, self.per_child):
            slots = range(first, first + self.per_child)
            self.children += spawn(self.broker, self.queues, self.table, slots)
        try:
            while not self._finished():
                self._step()
        finally:
            stop_all(self.children)
            try:
                self.heartbeat.stop()
            except BrokerUnavailable:
                pass  # the entry expires on its own
            self.relay.stop()
        logger.info("worker %s stopped", self.worker_id)
        return self.exit_code

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(signal.Signals(signum).name)

    def request_stop(self, what: str, *, again_is_now: bool = True) -> None:
        """Stop as on SIGTERM: let running tasks finish within the shutdown timeout.

        Safe from a signal handler and from another thread (the loop acts on it within a
        tick). A second request stops at once, unless again_is_now is False (a second code
        change under --autoreload is not a second Ctrl-C).
        """
        self.requests.append((what, again_is_now))

    def _take_requests(self) -> None:
        while self.requests:
            what, again_is_now = self.requests.pop(0)
            if self.stop_deadline is None:
                self.signals += 1
                logger.info(
                    "%s: finishing running tasks (up to %gs), then stopping; signal again to "
                    "stop now", what, self.shutdown_timeout,
                )  # fmt: skip
                self.stop_deadline = time.monotonic() + self.shutdown_timeout
                signal_all(self.children, signal.SIGTERM)
            elif again_is_now:
                self.signals += 1
                logger.info("%s again: stopping now", what)
                self.stop_deadline = 0.0

    def _finished(self) -> bool:
        self._take_requests()
        if self.stop_deadline is None:
            return False
        if all(c.stopped for c in self.children):
            return True
        if time.monotonic() >= self.stop_deadline:
            self._hand_back_running()
            return True
        return False

    def _step(self) -> None:
        """One look: dead children, timeouts, due loops; then sleep a tick."""
        self._reap()
        self._interrupt_stale_runs()
        self._enforce_timeouts()
        self.cancels.enforce(self.children)
        until_next_tick = self.ticker.run_due()
        if not self.ready:
            self.ready = True
            logger.info(
                "worker %s ready: %d children fetching, background loops running",
                self.worker_id, self.concurrency,
            )  # fmt: skip
        if self.ticker.gave_up and self.stop_deadline is None:
            logger.error(
                "worker %s stopping now (exit code %d): %s; the leases of its running tasks "
                "are gone, so they are killed and run again once recovered",
                self.worker_id, HEADLESS, self.ticker.gave_up,
            )  # fmt: skip
            self.exit_code, self.stop_deadline = HEADLESS, 0.0
        self._take_requests()
        if self.burst and self.stop_deadline is None:
            self._burst_check()
        time.sleep(min(TICK, until_next_tick))

    def _burst_check(self) -> None:
        """In burst mode: stop once nothing runs, nothing is pending and nothing is due."""
        if self.running():
            return
        try:
            moved = sum(self.broker.forward(q) for q in self.queues)
            pending = self.broker.pending_count(self.queues)
        except BrokerUnavailable as exc:
            logger.debug("burst: could not look for work (%s)", exc)  # the ticker says why
            return
        if not moved and not pending and not self.running():
            logger.info("burst: no work is due, stopping")
            self.stop_deadline = time.monotonic() + self.shutdown_timeout
            signal_all(self.children, signal.SIGTERM)

    # -- children ---------------------------------------------------------------------------

    def _reap(self) -> None:
        for c in children.processes(self.children):
            pid, status = os.waitpid(c.pid, os.WNOHANG)
            if pid == 0:
                continue
            for index, record in zip(c.slots, children.stopped(self.children, c), strict=True):
                task = self.table.reset(index)  # it may have died mid-write: not get()
                if task is not None:
                    self._child_died(record, task, status)
            if self.stop_deadline is None:
                first, last = c.slots.start, c.slots.stop
                self.children[first:last] = spawn(self.broker, self.queues, self.table, c.slots)

    def _child_died(self, c: ChildProcess, task: Running, status: int) -> None:
        """Ask the policy what becomes of the run of a child that exited, and write it."""
        delivery = self._delivery(task)
        if c.killed_for_lost:
            logger.warning(
                "task %s: child %d killed (its run lost its lease and did not stop within %gs); "
                "nothing written for it", delivery.id, c.pid, self.settings.timeout_grace,
            )  # fmt: skip
            return
        if asked := self.cancels.ended(c.pid, task):
            grace = self.settings.cancel_grace
            how = f"killed {grace:g}s after its cancel" if asked.killed else how_it_ended(status)
            what = f"child {c.pid} gone ({how}) before its canceled run stopped"
            decision = policy.stopped_for_cancel(what)
        elif c.killed_for_timeout:
            attempt = Attempt(task.attempt, task.max_attempts, int(task.epoch), task.backoff)
            decision = policy.timed_out(attempt, task.timeout)
            what = f"child {c.pid} killed after the timeout's grace"
        elif why := children.killed_for_another(self.children, c):
            decision = policy.handed_back(f"its child {c.pid} was killed: {why}")
            what = decision.error
        else:
            decision = policy.crashed(
                f"worker child {c.pid} died ({how_it_ended(status)}) while running it"
            )
            what = decision.error
        try:
            state = write_decision(self.broker, delivery, decision)
        except BrokerUnavailable as exc:
            logger.warning(
                "task %s: %s; could not write what becomes of it (%s): written once Redis "
                "answers", delivery.id, what, exc,
            )  # fmt: skip
            self.backlog.add(delivery, decision, what)
            return
        logger.warning("task %s: %s; now %s", delivery.id, what, state or "elsewhere")

    def _lease_lost(self, delivery: Delivery, since: float) -> None:
        """The heartbeat found a running task's lease lost: interrupt that run (not another)."""
        for index, c in enumerate(self.children):
            task = self.table.get(index)
            if c.stopped or task is None or task.task_id != delivery.id:
                continue
            if task.epoch != delivery.epoch:
                continue
            if c.lost == task:
                return  # signalled once already: a second signal would cut its cleanup short
            since = min(since, time.monotonic() - task.started)
            logger.warning(
                "task %s lost its lease (not renewed for %.0fs, lease %gs: Redis unreachable, "
                "or this worker stalled, and another worker recovered it): run interrupted, "
                "outcome not written", delivery.id, since, self.settings.lease,
            )  # fmt: skip
            self.table.mark_lost(index, task)
            c.lost, c.lost_at = task, time.monotonic()
            try:
                os.kill(c.pid, child.LOST_SIGNAL)
            except ProcessLookupError:
                pass  # exited already: _reap sees it
            return

    def _interrupt_stale_runs(self) -> None:
        """Two children running one task: the older epoch's run is stale (the task was recovered
        and handed out again, to this worker). Interrupt it now, not at the next heartbeat: the
        newer run waits for it to end (child.py `_wait_for_stale_run`)."""
        newest: dict[str, Running] = {}
        tasks = [self.table.get(index) for index in range(self.table.size)]
        for task in tasks:
            best = None if task is None else newest.get(task.task_id)
            if task is not None and (best is None or int(task.epoch) > int(best.epoch)):
                newest[task.task_id] = task
        for index, task in enumerate(tasks):
            if task is None or newest[task.task_id] is task:
                continue
            if self.children[index].lost != task:
                self._lease_lost(self._delivery(task), time.monotonic() - task.started)

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        grace = self.settings.timeout_grace
        for index, c in enumerate(self.children):
            task = self.table.get(index)
            if (
                c.lost is not None
                and task == c.lost
                and not c.stopped
                and not c.killed_for_lost
                and now - c.lost_at > grace
            ):
                logger.error(
                    "task %s: its run did not stop within %gs of losing its lease: killing "
                    "child %d", task.task_id, grace, c.pid,
                )  # fmt: skip
                c.killed_for_lost = True
                os.kill(c.pid, signal.SIGKILL)
                continue
            if (
                task is not None
                and not c.stopped
                and not c.killed_for_timeout
                and now - task.started > task.timeout + self.settings.timeout_grace
            ):
                logger.error(
                    "task %s ran past its timeout of %gs plus %gs of grace: killing child %d",
                    task.task_id, task.timeout, self.settings.timeout_grace, c.pid,
                )  # fmt: skip
                c.killed_for_timeout = True
                os.kill(c.pid, signal.SIGKILL)

    def _hand_back_running(self) -> None:
        """Stop busy children now and put their tasks back without spending an attempt."""
        children.kill_all(self.children)
        for index, c in enumerate(self.children):
            if c.stopped:
                continue
            c.stopped = True
            task = self.table.reset(index)
            if task is None:
                continue
            try:
                decision = policy.handed_back("stopped")
                if self.cancels.ended(c.pid, task):  # a canceled run does not go back
                    decision = policy.stopped_for_cancel("stopped with its worker after its cancel")
                state = write_decision(self.broker, self._delivery(task), decision)
                logger.info("task %s put back (worker stopping): %s", task.task_id, state)
            except BrokerUnavailable as exc:
                logger.warning("task %s: could not put it back (%s)", task.task_id, exc)
