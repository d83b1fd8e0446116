"""The code one task runs through (issue 13): at most 8 modules of django_jobs/ from its enqueue
to its ack, both sides together, in one direction (the enqueue runs no code of the worker, the
child none of the client's).

One enqueue in this process, and one task in a worker child's loop (run here, on this thread)
from its fetch to its ack, traced with sys.setprofile: a child of one queue, and one of the
queues a default worker serves (`JobsSettings.served_queues`, what runworker takes with no
--queues, in strict priority), the task on one after the first (its fetch is then the fetch of
several queues). The plain-data modules (message, keys, conf, exceptions) are left out;
docs/concepts.rst (`task-path`) lists what remains.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from django_jobs.client import get_broker
from django_jobs.worker.child import Child
from django_jobs.worker.slots import SlotTable
from testproject.probes.jobs import Noop, Number
from tests.conftest import RedisNamespace
from tests.integration.test_child_alarm import restored_signals  # noqa: F401 (a fixture)

PACKAGE = os.sep + "django_jobs" + os.sep
#: The plain-data layer of pyproject's layers: what every module reads, not a seam it crosses.
DATA = ("message.py", "keys.py", "conf" + os.sep, "exceptions.py")
MOST = 8


def recorder(seen: list[str]) -> Callable[[FrameType, str, Any], None]:
    """A profile function that appends to seen each module of django_jobs/ whose code starts
    running, the first time it does (plain data left out)."""

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            if PACKAGE in path:
                module = path.split(PACKAGE, 1)[1]
                if module not in seen and not module.startswith(DATA):
                    seen.append(module)

    return profile


@contextmanager
def modules_run() -> Iterator[list[str]]:
    """The modules of django_jobs/ whose code runs inside the block, in the order they first do."""
    seen: list[str] = []
    sys.setprofile(recorder(seen))
    try:
        yield seen
    finally:
        sys.setprofile(None)


class TracedChild(Child):
    """A child whose second task (from the start of its run to its ack) runs traced."""

    def __init__(self, *args: Any, trace: Callable[[bool], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trace = trace

    def _run(self, delivery: Any) -> Any:
        self.trace(self.done == 1)  # on at the second task, off at the third
        return super()._run(delivery)


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("served", ["one queue", "a default worker's queues"])
def test_task_path__enqueue_and_the_child_cross_at_most_8_modules_in_one_direction(
    redis_ns: RedisNamespace, settings: Any, served: str
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 3}
    Noop.enqueue(Number(0))  # imports and caches warm
    with modules_run() as enqueue:
        Noop.enqueue(Number(1))
    Noop.enqueue(Number(2))

    child_side: list[str] = []

    def trace(on: bool) -> None:
        sys.setprofile(recorder(child_side) if on else None)

    broker = get_broker()
    queues = ["default"]
    if served != "one queue":
        queues = list(broker.settings.served_queues)
        assert queues.index("default") > 0, queues  # the fetch of several queues, not of one
    child = TracedChild(broker, queues, SlotTable(1), 0, os.getppid(), trace=trace)
    try:
        child.run()
    finally:
        sys.setprofile(None)

    assert child.done == 3
    assert len(enqueue) <= MOST, enqueue
    assert len(child_side) <= MOST, child_side
    # Both sides together: the modules one task crosses, from its enqueue to its ack.
    both = sorted(set(enqueue) | set(child_side))
    assert len(both) <= MOST, both
    # One direction: the enqueue reaches no code of the worker, the child none of the client's.
    assert not [m for m in enqueue if m.startswith("worker" + os.sep)], enqueue
    assert not [m for m in child_side if m.startswith(("client.py", "backends"))], child_side
    assert enqueue[0] == "jobs.py", enqueue
    assert enqueue[-1].startswith("broker" + os.sep), enqueue
    assert child_side[0] == os.path.join("worker", "child.py"), child_side
    # The read side is no part of the hot path (the keys of a queue live with the wire).
    assert os.path.join("broker", "inspect.py") not in enqueue + child_side
