"""The supervisor: N forked children, one task each, and the background loops.

The supervisor alone fetches: it dequeues one task per free child (no prefetch, so priorities
hold), hands it over a pipe, and so always knows which task each child runs. That is what lets it

- renew the leases of running tasks (the heartbeat, DESIGN.md: not a thread beside the handler);
- put a task back within a second when its child dies, without waiting for the lease;
- kill a child stuck past its task's timeout plus a grace period, and retry the task;
- stop cleanly: on SIGTERM/SIGINT stop fetching, let running tasks finish within the shutdown
  timeout, then put the rest back without spending an attempt. A second signal is immediate.

Start order: signal handlers, children (forked before any thread or connection exists), then
the loops (heartbeat first, so leases are renewed from the first second). Stop order: children,
then the registry entry.
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
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from types import FrameType

from django.db import connections

from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable, UnknownJob
from django_jobs.jobs import Job, registry
from django_jobs.message import DecodeError, decode
from django_jobs.worker import child
from django_jobs.worker.forwarder import Forwarder
from django_jobs.worker.heartbeat import Heartbeat
from django_jobs.worker.janitor import Janitor
from django_jobs.worker.loop import Ticker
from django_jobs.worker.recoverer import Recoverer

logger = logging.getLogger("django_jobs.worker.supervisor")

#: Longest the supervisor blocks on Redis or its children before it looks around again
#: (signals, dead children, timeouts, due loops): bounds how late any of those is handled.
POLL = 1.0
#: Seconds between dequeue attempts while no wake-up token arrives. Every way in to pending
#: pushes a token (enqueue, forward, recover, requeue, retry now); this catches the rest
#: (a queue resumed, tokens lost with a Redis restart) at little cost to an idle worker.
RECHECK = 5.0


@dataclass
class Slot:
    """One child process and the task it runs, if any."""

    pid: int
    conn: Connection
    delivery: Delivery | None = None
    started: float = 0.0
    timeout: float = 0.0
    killed_for_timeout: bool = False
    retiring: bool = False
    stopped: bool = field(default=False)


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
        self.slots: list[Slot] = []
        self.signals = 0
        #: Whether a dequeue may find work: set by wake-up tokens, cleared by an empty dequeue.
        self.maybe_work = True
        self.recheck_at = 0.0
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
        return [slot.delivery for slot in self.slots if slot.delivery is not None]

    # -- lifecycle --------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; return the exit code (0 on a clean stop)."""
        if threading.current_thread() is threading.main_thread():  # not under --autoreload
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        for _ in range(self.concurrency):
            self.slots.append(self._spawn())
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
        else:
            logger.info("%s again: stopping now", signal.Signals(signum).name)
            self.stop_deadline = 0.0

    def _finished(self) -> bool:
        if self.stop_deadline is None:
            return False
        if all(slot.delivery is None for slot in self.slots):
            return True
        if time.monotonic() >= self.stop_deadline:
            self._hand_back_running()
            return True
        return False

    def _step(self) -> None:
        """One pass: children's news, timeouts, due loops, then fetch or wait."""
        self._collect(timeout=0)
        self._reap()
        self._enforce_timeouts()
        until_next_tick = self.ticker.run_due()
        free = [slot for slot in self.slots if slot.delivery is None and not slot.retiring]
        if self.stop_deadline is not None or not free:
            self._collect(timeout=min(POLL, until_next_tick))
            return
        try:
            if self.maybe_work or time.monotonic() >= self.recheck_at:
                delivery = self.broker.dequeue(self.queues)
                if delivery is not None:
                    self._dispatch(free[0], delivery)
                    return
                self.maybe_work = False
                self.recheck_at = time.monotonic() + RECHECK
            if self.burst:  # no blocking wait: look again after each task, then stop
                self.maybe_work = True
                if self.running():
                    self._collect(timeout=POLL)
                elif not sum(self.broker.forward(q) for q in self.queues):
                    logger.info("burst: no work is due, stopping")
                    self.stop_deadline = time.monotonic()
                return
            self.maybe_work = self.broker.wait_for_work(
                self.queues, timeout=min(POLL, max(until_next_tick, 0.01))
            )
        except BrokerUnavailable as exc:
            logger.warning("%s; trying again in %gs", exc, POLL)
            self._collect(timeout=POLL)

    # -- children ---------------------------------------------------------------------------

    def _spawn(self) -> Slot:
        parent_end, child_end = Pipe()
        # No database connection may cross a fork: two processes on one socket corrupt it.
        connections.close_all()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                parent_end.close()
                for slot in self.slots:
                    slot.conn.close()
                child.main(child_end, self.broker)
            except BaseException:
                logger.exception("worker child %d crashed", os.getpid())
                code = 1
            finally:
                logging.shutdown()
                os._exit(code)
        child_end.close()
        return Slot(pid=pid, conn=parent_end)

    def _dispatch(self, slot: Slot, delivery: Delivery) -> None:
        slot.delivery = delivery
        slot.started = time.monotonic()
        slot.timeout = self._timeout_of(delivery)
        slot.killed_for_timeout = False
        try:
            slot.conn.send(delivery)
        except OSError:
            pass  # the child just died: _reap puts the task back

    def _timeout_of(self, delivery: Delivery) -> float:
        try:
            return decode(delivery.raw).timeout
        except DecodeError:
            return self.settings.timeout  # the child will send it to dead at once

    def _collect(self, timeout: float) -> None:
        """Read what children reported; wait up to timeout for the first report."""
        by_conn = {slot.conn: slot for slot in self.slots if not slot.stopped}
        for conn in wait(list(by_conn), timeout=timeout):
            self._collect_from(by_conn[conn])  # type: ignore[index]

    def _reap(self) -> None:
        for index, slot in enumerate(self.slots):
            if slot.stopped:
                continue
            pid, status = os.waitpid(slot.pid, os.WNOHANG)
            if pid == 0:
                continue
            self._collect_from(slot)
            if slot.delivery is not None:
                self._child_died(slot, status)
            slot.conn.close()
            slot.stopped = True
            if self.stop_deadline is None:
                self.slots[index] = self._spawn()

    def _collect_from(self, slot: Slot) -> None:
        """Read a child's reports: (task id, state, retiring) per finished task."""
        try:
            while slot.conn.poll():
                task_id, _state, retire = slot.conn.recv()
                if slot.delivery is not None and slot.delivery.id == task_id:
                    slot.delivery = None
                slot.retiring = slot.retiring or retire
        except (EOFError, OSError):
            pass  # the child exited: _reap handles it

    def _child_died(self, slot: Slot, status: int) -> None:
        delivery = slot.delivery
        assert delivery is not None
        slot.delivery = None
        how = (
            f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.WEXITSTATUS(status)}"
        )
        try:
            if slot.killed_for_timeout:
                self._timed_out(delivery, slot.timeout)
                return
            reason = f"worker child {slot.pid} died ({how}) while running it"
            state = self.broker.requeue(delivery, crash=True, reason=reason)
            logger.warning("task %s: %s; now %s", delivery.id, reason, state or "elsewhere")
        except BrokerUnavailable as exc:
            logger.warning("task %s: could not put it back (%s); its lease will", delivery.id, exc)

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if (
                slot.delivery is not None
                and not slot.killed_for_timeout
                and now - slot.started > slot.timeout + self.settings.timeout_grace
            ):
                logger.error(
                    "task %s ran past its timeout of %gs plus %gs of grace: killing child %d",
                    slot.delivery.id, slot.timeout, self.settings.timeout_grace, slot.pid,
                )  # fmt: skip
                slot.killed_for_timeout = True
                os.kill(slot.pid, signal.SIGKILL)

    def _timed_out(self, delivery: Delivery, timeout: float) -> None:
        """Retry (or kill, past max_attempts) a task whose child was killed for its timeout."""
        error = f"JobTimeout: timed out after {timeout:g} s (killed after the grace period)"
        try:
            message = decode(delivery.raw)
            job: type[Job[object]] | None = registry.get(message.job)
            max_attempts = message.max_attempts
        except (DecodeError, UnknownJob):
            job, max_attempts = None, 1
        attempt = delivery.attempts + 1
        if job is None or attempt >= max_attempts:
            self.broker.kill(delivery, error, "")
        else:
            self.broker.retry(delivery, job.backoff(attempt), error, "")

    def _hand_back_running(self) -> None:
        """Stop busy children now and put their tasks back without spending an attempt."""
        for slot in self.slots:
            if slot.delivery is None:
                continue
            os.kill(slot.pid, signal.SIGKILL)
            os.waitpid(slot.pid, 0)
            slot.stopped = True
            self._collect_from(slot)  # it may have finished just before
            if slot.delivery is None:
                continue
            try:
                state = self.broker.requeue(slot.delivery, crash=False, reason="worker stopped")
                logger.info("task %s put back (worker stopping): %s", slot.delivery.id, state)
            except BrokerUnavailable as exc:
                logger.warning("task %s: could not put it back (%s)", slot.delivery.id, exc)
            slot.delivery = None

    def _stop_children(self) -> None:
        """Tell idle children to exit and wait for them; kill any that do not."""
        live = [slot for slot in self.slots if not slot.stopped]
        for slot in live:
            try:
                slot.conn.send(None)
            except OSError:
                pass  # already gone
        deadline = time.monotonic() + 5
        for slot in live:
            while os.waitpid(slot.pid, os.WNOHANG)[0] == 0:
                if time.monotonic() > deadline:
                    os.kill(slot.pid, signal.SIGKILL)
                    os.waitpid(slot.pid, 0)
                    break
                time.sleep(0.01)
            slot.stopped = True
