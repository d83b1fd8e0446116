"""A worker child: receive one task at a time from the supervisor, run it, report back.

The child writes nothing to Redis itself: it sends the supervisor a Verdict (ack, retry or
kill), and the supervisor writes the verdicts of all its children with its next fetch, in one
round trip.

The child runs the handler on its main thread, so the task timeout is a SIGALRM that raises
JobTimeout inside the handler. A handler that does not return to Python in time (C code holding
the GIL, a handler that swallows JobTimeout) is killed by the supervisor after a grace period.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from types import FrameType

from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import JobTimeout
from django_jobs.worker.processor import Processor

logger = logging.getLogger("django_jobs.worker.child")


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise JobTimeout in this (main) thread if the block runs longer than seconds."""
    armed = True

    def expire(signum: int, frame: FrameType | None) -> None:
        if armed:
            raise JobTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _memory_mib() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(conn: Connection, broker: RedisBroker) -> None:
    """Serve tasks until the supervisor says stop (None), goes away (EOF), or recycling is due."""
    # The supervisor alone decides when a child stops: Ctrl-C reaches the whole process group,
    # and a process manager may signal every process; neither may cut a task short here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    settings = broker.settings
    processor = Processor(broker, guard=alarm)
    done = 0
    while True:
        try:
            delivery = conn.recv()
        except (EOFError, OSError):
            return  # the supervisor is gone
        if delivery is None:
            return
        verdict = processor.decide(delivery)
        done += 1
        retire = (settings.max_tasks_per_child and done >= settings.max_tasks_per_child) or (
            settings.max_memory_per_child and _memory_mib() > settings.max_memory_per_child
        )
        conn.send((verdict, bool(retire)))
        if retire:
            logger.info(
                "child %d retires after %d tasks (%.0f MiB)", os.getpid(), done, _memory_mib()
            )
            return
