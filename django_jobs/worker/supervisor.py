"""The supervisor: N forked children, the slot table, and the background loops.

Children fetch and run tasks themselves (see child.py) and record what they run in the shared
slot table. The supervisor reads that table to

- renew the leases of running tasks (the heartbeat, DESIGN.md: not a thread beside the handler);
- put a task back at once when its child dies, without waiting for the lease;
- kill a child stuck past its task's timeout plus a grace period, and retry the task;
- stop cleanly: on SIGTERM/SIGINT children stop fetching and finish their task within the
  shutdown timeout; the rest are stopped and their tasks put back without spending an attempt.
  A second signal is immediate.

Start order: signal handlers, the slot table, children (forked before any thread or connection
exists), then the loops (heartbeat first, so leases are renewed from the first second). Stop
order: children, then the registry entry.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from django.db import connections

from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable, UnknownJob
from django_jobs.jobs import registry
from django_jobs.message import DecodeError, decode
from django_jobs.worker import child
from django_jobs.worker.forwarder import Forwarder
from django_jobs.worker.heartbeat import Heartbeat
from django_jobs.worker.janitor import Janitor
from django_jobs.worker.loop import Ticker
from django_jobs.worker.recoverer import Recoverer
from django_jobs.worker.slots import Running, SlotTable

logger = logging.getLogger("django_jobs.worker.supervisor")

#: Seconds between two looks at the children (deaths, timeouts, signals): bounds how late a
#: dead child's task goes back. Each look is a few system calls, no Redis command.
TICK = 0.05
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@dataclass
class Child:
    """One child process in its slot."""

    pid: int
    killed_for_timeout: bool = False
    stopped: bool = False


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
    ) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.queues = tuple(queues)
        self.concurrency = concurrency
        self.burst = burst
        self.shutdown_timeout = (
            self.settings.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
        )
        self.table = SlotTable(concurrency)
        self.children: list[Child] = []
        self.signals = 0
        self.stop_deadline: float | None = None
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.heartbeat = Heartbeat(broker, self.worker_id, self.info(), self.running)
        self.ticker = Ticker(
            [
                self.heartbeat,
                Forwarder(broker, self.queues),
                Recoverer(broker, self.queues),
                Janitor(broker, self.queues),
            ]
        )

    def info(self) -> dict[str, str | int | float]:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": ",".join(self.queues),
            "concurrency": self.concurrency,
            "started": time.time(),
        }

    def running(self) -> list[Delivery]:
        """The tasks the children run now, as deliveries (for leases and the registry)."""
        out = []
        for index in range(self.concurrency):
            task = self.table.get(index)
            if task is not None:
                out.append(self._delivery(task))
        return out

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
        for index in range(self.concurrency):
            self.children.append(self._spawn(index))
        try:
            while not self._finished():
                self._step()
        finally:
            self._stop_children()
            try:
                self.heartbeat.stop()
            except BrokerUnavailable:
                pass  # the entry expires on its own
        logger.info("worker %s stopped", self.worker_id)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            logger.info(
                "%s: finishing running tasks (up to %gs), then stopping; signal again to stop "
                "now", signal.Signals(signum).name, self.shutdown_timeout,
            )  # fmt: skip
            self.stop_deadline = time.monotonic() + self.shutdown_timeout
            self._signal_children(signal.SIGTERM)
        else:
            logger.info("%s again: stopping now", signal.Signals(signum).name)
            self.stop_deadline = 0.0

    def _finished(self) -> bool:
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
        self._enforce_timeouts()
        until_next_tick = self.ticker.run_due()
        if self.burst and self.stop_deadline is None:
            self._burst_check()
        time.sleep(min(TICK, until_next_tick))

    def _burst_check(self) -> None:
        """In burst mode: stop once nothing runs, nothing is pending and nothing is due."""
        if self.running():
            return
        try:
            moved = sum(self.broker.forward(q) for q in self.queues)
            with self.broker.unavailable():
                pending = sum(
                    self.broker.client.llen(self.broker.keys(q).pending) for q in self.queues
                )
        except BrokerUnavailable as exc:
            logger.warning("%s", exc)
            return
        if not moved and not pending and not self.running():
            logger.info("burst: no work is due, stopping")
            self.stop_deadline = time.monotonic() + self.shutdown_timeout
            self._signal_children(signal.SIGTERM)

    # -- children ---------------------------------------------------------------------------

    def _spawn(self, index: int) -> Child:
        self.table.clear(index)
        # No database connection may cross a fork: two processes on one socket corrupt it.
        connections.close_all()
        # Hold stop signals across the fork: until the child has its own handlers, a SIGTERM
        # would run the supervisor's handler in the child and be lost. It stays pending instead.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        # Everything imported so far lives as long as the process: the child's collector need
        # not scan it (a full collection of a Django project's heap takes milliseconds, paid by
        # the task it lands on), and not touching it keeps its pages shared with the supervisor.
        gc.freeze()
        pid = os.fork()
        if pid != 0:
            gc.unfreeze()  # the supervisor's own garbage stays collectable
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                child.main(self.broker, self.queues, self.table, index)
            except BaseException:
                logger.exception("worker child %d crashed", os.getpid())
                code = 1
            finally:
                logging.shutdown()
                os._exit(code)
        return Child(pid=pid)

    def _signal_children(self, signum: int) -> None:
        for c in self.children:
            if not c.stopped:
                try:
                    os.kill(c.pid, signum)
                except ProcessLookupError:
                    pass  # exited already: _reap sees it

    def _reap(self) -> None:
        for index, c in enumerate(self.children):
            if c.stopped:
                continue
            pid, status = os.waitpid(c.pid, os.WNOHANG)
            if pid == 0:
                continue
            c.stopped = True
            task = self.table.reset(index)  # it may have died mid-write: not get()
            if task is not None:
                self._child_died(c, task, status)
            if self.stop_deadline is None:
                self.children[index] = self._spawn(index)

    def _child_died(self, c: Child, task: Running, status: int) -> None:
        delivery = self._delivery(task)
        how = (
            f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.WEXITSTATUS(status)}"
        )
        try:
            if c.killed_for_timeout:
                self._timed_out(delivery, task.timeout)
                return
            reason = f"worker child {c.pid} died ({how}) while running it"
            state = self.broker.requeue(delivery, crash=True, reason=reason)
            logger.warning("task %s: %s; now %s", delivery.id, reason, state or "elsewhere")
        except BrokerUnavailable as exc:
            logger.warning("task %s: could not put it back (%s); its lease will", delivery.id, exc)

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for index, c in enumerate(self.children):
            task = self.table.get(index)
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

    def _timed_out(self, delivery: Delivery, timeout: float) -> None:
        """Retry (or kill, past max_attempts) a task whose child was killed for its timeout."""
        error = f"JobTimeout: timed out after {timeout:g} s (killed after the grace period)"
        k = self.broker.keys(delivery.queue)
        raw = (
            self.broker.client.hget(k.task(delivery.id), "attempts"),
            self.broker.client.hget(k.task(delivery.id), "msg"),
        )
        try:
            message = decode(str(raw[1] or ""))
            job = registry.get(message.job)
        except (DecodeError, UnknownJob):
            self.broker.kill(delivery, error, "")
            return
        attempt = int(raw[0] or 0) + 1
        if attempt >= message.max_attempts:
            self.broker.kill(delivery, error, "")
        else:
            self.broker.retry(delivery, job.backoff(attempt), error, "")

    def _hand_back_running(self) -> None:
        """Stop busy children now and put their tasks back without spending an attempt."""
        for index, c in enumerate(self.children):
            if c.stopped:
                continue
            os.kill(c.pid, signal.SIGKILL)
            os.waitpid(c.pid, 0)
            c.stopped = True
            task = self.table.reset(index)
            if task is None:
                continue
            try:
                state = self.broker.requeue(self._delivery(task), crash=False, reason="stopped")
                logger.info("task %s put back (worker stopping): %s", task.task_id, state)
            except BrokerUnavailable as exc:
                logger.warning("task %s: could not put it back (%s)", task.task_id, exc)

    def _stop_children(self) -> None:
        """Ask children still running to stop, wait a little, then kill what is left."""
        self._signal_children(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for c in self.children:
            while not c.stopped:
                if os.waitpid(c.pid, os.WNOHANG)[0] != 0:
                    c.stopped = True
                elif time.monotonic() > deadline:
                    os.kill(c.pid, signal.SIGKILL)
                    os.waitpid(c.pid, 0)
                    c.stopped = True
                else:
                    time.sleep(0.01)
