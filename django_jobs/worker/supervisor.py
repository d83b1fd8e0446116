"""The supervisor: N forked children, one task each, and the background loops.

The supervisor alone talks to Redis about tasks. Each pass of its loop writes the outcomes its
children reported and fetches one task per free child (no prefetch, so priorities hold), all in
one round trip; it hands each task over a pipe, and so always knows which task each child runs.
When there is nothing to do it waits on the children's pipes and on an outstanding BLPOP for
wake-up tokens at once, so an enqueue into an idle worker starts within a millisecond or so.
Knowing every running task is what lets it

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
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any

import redis
from django.db import connections
from redis.connection import Connection as RedisConnection

from django_jobs.broker.protocol import Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable, UnknownJob
from django_jobs.jobs import Job, registry
from django_jobs.message import DecodeError, decode
from django_jobs.worker import child
from django_jobs.worker.forwarder import Forwarder
from django_jobs.worker.heartbeat import Heartbeat
from django_jobs.worker.janitor import Janitor
from django_jobs.worker.loop import Ticker
from django_jobs.worker.processor import outcome
from django_jobs.worker.recoverer import Recoverer

logger = logging.getLogger("django_jobs.worker.supervisor")

#: Longest the supervisor waits before it looks around again (signals, timeouts, due loops).
POLL = 1.0
#: Seconds between dequeue attempts while no wake-up token arrives. Every way into pending
#: pushes a token (enqueue, forward, recover, requeue, retry now); this catches the rest
#: (a queue resumed, tokens lost with a Redis restart) at little cost to an idle worker.
RECHECK = 5.0
#: Seconds the outstanding BLPOP for wake-up tokens blocks in Redis before it is renewed.
WAKE_TIMEOUT = 5


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
    #: The child's pipe is closed: it exited or is exiting.
    eof: bool = False
    stopped: bool = False


class Waker:
    """A BLPOP on the queues' wake-up keys, left outstanding while the supervisor waits.

    It has a connection of its own and a `fileno()`, so the supervisor can wait on it and on its
    children's pipes in one call.
    """

    def __init__(self, broker: RedisBroker, queues: Sequence[str]) -> None:
        self.pool = broker.client.connection_pool
        self.keys = [broker.keys(queue).wake for queue in queues]
        self.connection: RedisConnection | None = None
        self.armed = False

    def arm(self) -> None:
        """Send the BLPOP unless one is outstanding (raises redis.ConnectionError)."""
        if self.armed:
            return
        if self.connection is None:
            self.connection = self.pool.get_connection()
        self.connection.send_command("BLPOP", *self.keys, WAKE_TIMEOUT)  # type: ignore[no-untyped-call]
        self.armed = True

    def fileno(self) -> int:
        assert self.connection is not None
        assert self.connection._sock is not None
        return self.connection._sock.fileno()

    def read(self) -> bool:
        """Read the BLPOP's answer: whether a token arrived (raises redis.ConnectionError)."""
        assert self.connection is not None
        self.armed = False
        return self.connection.read_response() is not None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.disconnect()  # type: ignore[no-untyped-call]
            self.pool.release(self.connection)
        self.connection = None
        self.armed = False


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
        self.stop_deadline: float | None = None
        #: Whether a dequeue may find work: set by wake-up tokens, cleared by a short fetch.
        self.maybe_work = True
        self.recheck_at = 0.0
        #: Reported outcomes not yet written (Redis was unavailable).
        self.unwritten: list[Verdict] = []
        self.waker = Waker(broker, self.queues)
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
            self._settle_last()
            self.waker.close()
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
        if all(slot.delivery is None for slot in self.slots) and not self.unwritten:
            return True
        if time.monotonic() >= self.stop_deadline:
            self._hand_back_running()
            return True
        return False

    def _step(self) -> None:
        """One pass: take reports, write them and fetch in one round trip, or wait."""
        verdicts = self._reports()
        self._reap()
        self._enforce_timeouts()
        until_next_tick = self.ticker.run_due()
        free = [s for s in self.slots if s.delivery is None and not s.retiring and not s.eof]
        fetching = self.stop_deadline is None and bool(free)
        want = len(free) if fetching and (self.maybe_work or self._recheck_due()) else 0
        if verdicts or want:
            try:
                written, deliveries = self.broker.settle(verdicts, self.queues, want)
            except BrokerUnavailable as exc:
                self.unwritten = verdicts  # the leases still hold; written at the next pass
                logger.warning("%s; trying again in %gs", exc, POLL)
                self._wait(POLL, arm=False)
                return
            for verdict, ok in zip(verdicts, written, strict=True):
                outcome(verdict, ok)
            for slot, delivery in zip(free, deliveries, strict=False):
                self._dispatch(slot, delivery)
            if want and len(deliveries) < want:
                self.maybe_work = False
                self.recheck_at = time.monotonic() + RECHECK
            if deliveries or verdicts:
                return  # look again at once: more may be waiting
        if self.burst and fetching:
            self._burst_check()
            return
        self._wait(min(POLL, until_next_tick), arm=fetching)

    def _recheck_due(self) -> bool:
        return time.monotonic() >= self.recheck_at

    def _burst_check(self) -> None:
        """In burst mode: stop once nothing runs and nothing is due."""
        self.maybe_work = True  # no wake-up tokens in burst mode: look again after each task
        if self.running():
            self._wait(POLL, arm=False)
            return
        try:
            moved = sum(self.broker.forward(q) for q in self.queues)
        except BrokerUnavailable as exc:
            logger.warning("%s; trying again in %gs", exc, POLL)
            return
        if not moved:
            logger.info("burst: no work is due, stopping")
            self.stop_deadline = time.monotonic()

    def _wait(self, timeout: float, *, arm: bool) -> None:
        """Wait for a child's report, a wake-up token (if armed), or the timeout."""
        if arm:
            try:
                self.waker.arm()
            except redis.ConnectionError as exc:
                logger.warning("cannot wait for work on Redis (%s); polling", exc)
                self.waker.close()
        waiting: list[Any] = [slot.conn for slot in self.slots if not slot.eof]
        if self.waker.armed:
            waiting.append(self.waker)
        ready: list[Any] = wait(waiting, timeout=max(timeout, 0.0))
        if self.waker in ready:
            try:
                self.maybe_work = self.waker.read() or self.maybe_work
            except (redis.ConnectionError, redis.TimeoutError):
                self.waker.close()
                self.maybe_work = True

    def _settle_last(self) -> None:
        """Write what children reported before they stopped."""
        verdicts = self._reports()
        if verdicts:
            try:
                written, _ = self.broker.settle(verdicts, self.queues, 0)
            except BrokerUnavailable as exc:
                logger.warning("could not write %d outcomes (%s)", len(verdicts), exc)
                return
            for verdict, ok in zip(verdicts, written, strict=True):
                outcome(verdict, ok)

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

    def _reports(self) -> list[Verdict]:
        """Take what children reported since the last pass (and what is still unwritten)."""
        verdicts, self.unwritten = self.unwritten, []
        live = {slot.conn: slot for slot in self.slots if not slot.eof}
        for conn in wait(list(live), timeout=0):
            verdicts += self._read(live[conn])  # type: ignore[index]
        return verdicts

    def _read(self, slot: Slot) -> list[Verdict]:
        """Read a child's reports: (verdict, retiring) per finished task."""
        verdicts = []
        try:
            while slot.conn.poll():
                verdict, retire = slot.conn.recv()
                if slot.delivery is not None and slot.delivery.id == verdict.task_id:
                    slot.delivery = None
                slot.retiring = slot.retiring or retire
                verdicts.append(verdict)
        except (EOFError, OSError):
            slot.eof = True  # the child exited: _reap handles it
        return verdicts

    def _reap(self) -> None:
        for index, slot in enumerate(self.slots):
            if slot.stopped or not (slot.eof or slot.killed_for_timeout):
                continue
            pid, status = os.waitpid(slot.pid, os.WNOHANG)
            if pid == 0:
                continue
            self.unwritten += self._read(slot)
            if slot.delivery is not None:
                self._child_died(slot, status)
            slot.conn.close()
            slot.stopped = True
            if self.stop_deadline is None:
                self.slots[index] = self._spawn()

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
            self.unwritten += self._read(slot)  # it may have finished just before
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
