"""The supervisor's children as processes: fork one, signal them, stop them, say how one ended.

What a child does is child.py (async_child.py for one with several slots); what the supervisor
does with what they run is supervisor.py. The supervisor keeps one `ChildProcess` per slot of
the table: an async child's slots each have one, all with its pid, so that what becomes of a run
(killed for its timeout, its lease lost) is recorded per run.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections

from django_jobs.broker.redis import RedisBroker
from django_jobs.worker import async_child, child
from django_jobs.worker.slots import Running, SlotTable

logger = logging.getLogger("django_jobs.worker.supervisor")

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: Seconds `stop_all` waits for children to exit on SIGTERM before it kills them.
STOP_WAIT = 5.0


@dataclass
class ChildProcess:
    """The supervisor's record of one slot's child process."""

    pid: int
    #: The slots of the table the process owns (several for an async child), this one among them.
    slots: range = range(1)
    killed_for_timeout: bool = False
    stopped: bool = False
    #: The run whose lease was lost, signalled at `lost_at` (monotonic), killed if it stays.
    lost: Running | None = None
    lost_at: float = 0.0
    killed_for_lost: bool = False
    #: Killed because its run did not stop within JOBS["CANCEL_GRACE"] of its cancel.
    killed_for_cancel: bool = False


def spawn(
    broker: RedisBroker, queues: Sequence[str], table: SlotTable, slots: range
) -> list[ChildProcess]:
    """Fork the child of these slots (emptied first); return a record for each slot."""
    for index in slots:
        table.clear(index)
    parent = os.getpid()
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
            if len(slots) == 1:
                child.main(broker, queues, table, slots[0], parent)
            else:
                async_child.main(broker, queues, table, slots, parent)
        except BaseException:
            logger.exception("worker child %d crashed", os.getpid())
            code = 1
        finally:
            logging.shutdown()
            os._exit(code)
    return [ChildProcess(pid=pid, slots=slots) for _ in slots]


def processes(children: Sequence[ChildProcess]) -> list[ChildProcess]:
    """One record per process not known to have exited (its first slot's)."""
    return [c for index, c in enumerate(children) if not c.stopped and index == c.slots.start]


def signal_all(children: Sequence[ChildProcess], signum: int) -> None:
    """Send signum to every child not known to have exited."""
    for c in processes(children):
        try:
            os.kill(c.pid, signum)
        except ProcessLookupError:
            pass  # exited already: the supervisor's reap sees it


def stopped(children: Sequence[ChildProcess], c: ChildProcess) -> list[ChildProcess]:
    """Record that c's process exited, in the records of all its slots; return them."""
    records = list(children[c.slots.start : c.slots.stop])
    for record in records:
        record.stopped = True
    return records


def killed_for_another(children: Sequence[ChildProcess], c: ChildProcess) -> str:
    """Why the supervisor killed c's process for the run of another of its slots ("" if it
    did not): an async child's other runs go back then, unspent and not counted as crashes."""
    for record in children[c.slots.start : c.slots.stop]:
        if record is c or record.pid != c.pid:
            continue
        if record.killed_for_timeout:
            return "another of its runs was past its timeout"
        if record.killed_for_lost:
            return "another of its runs lost its lease and did not stop"
        if record.killed_for_cancel:
            return "another of its runs was canceled and did not stop"
    return ""


def kill_all(children: Sequence[ChildProcess]) -> None:
    """SIGKILL every child process not known to have exited, and reap it (records unchanged)."""
    for c in processes(children):
        os.kill(c.pid, signal.SIGKILL)
        os.waitpid(c.pid, 0)


def stop_all(children: Sequence[ChildProcess]) -> None:
    """Ask children still running to stop, wait a little, then kill what is left."""
    signal_all(children, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    for c in processes(children):
        while not c.stopped:
            if os.waitpid(c.pid, os.WNOHANG)[0] != 0:
                stopped(children, c)
            elif time.monotonic() > deadline:
                os.kill(c.pid, signal.SIGKILL)
                os.waitpid(c.pid, 0)
                stopped(children, c)
            else:
                time.sleep(0.01)


def how_it_ended(status: int) -> str:
    """A wait status in words: "killed by SIGKILL", "exit code 1"."""
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.WEXITSTATUS(status)}"
