"""A worker child's timeout alarm survives a job that replaces the SIGALRM handler.

The child runs here, on this thread (as in test_task_path.py), over two tasks: the first job
installs a handler of its own and leaves it; the second run must still have the child's.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs.client import get_broker
from django_jobs.jobs import Job
from django_jobs.worker.child import LOST_SIGNAL, Child
from django_jobs.worker.slots import Running, SlotTable
from tests.conftest import RedisNamespace

SIGNALS = (signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
#: What the second run found installed for SIGALRM.
seen: list[Any] = []


@dataclass(frozen=True)
class Step:
    replace: bool


class AlarmProbe(Job[Step]):
    name = "tests.AlarmProbe"

    def run(self, payload: Step) -> None:
        if payload.replace:
            signal.signal(signal.SIGALRM, lambda signum, frame: None)  # never put back
        else:
            seen.append(signal.getsignal(signal.SIGALRM))


@pytest.fixture
def restored_signals() -> Iterator[None]:
    """The child installs its handlers in this process: put pytest's back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in SIGNALS}
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_child__a_job_that_replaces_the_alarm_handler_does_not_disarm_the_next_timeout(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 2}
    seen.clear()
    AlarmProbe.enqueue(Step(replace=True))
    AlarmProbe.enqueue(Step(replace=False))

    child = Child(get_broker(), ["default"], SlotTable(1), 0, os.getppid())
    child.run()

    assert child.done == 2
    assert seen == [child._alarm_handler]


ran: list[int] = []


class CancelProbe(Job[Step]):
    name = "tests.CancelProbe"

    def run(self, payload: Step) -> None:
        ran.append(1)


class CanceledAsItStarts(SlotTable):
    """The supervisor marks the run canceled and signals the child the moment the child
    publishes it, before its handler's alarm is armed (as while it waits for a stale run)."""

    def set(self, index: int, running: Running) -> None:
        super().set(index, running)
        self.mark_canceled(index, running)
        os.kill(os.getpid(), LOST_SIGNAL)


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_child__a_cancel_signalled_before_the_handler_is_armed_is_not_dropped(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    # The supervisor signals a cancel once: a signal that came while no alarm was armed must
    # still interrupt the run with JobCanceled as it starts, not leave it running until the
    # kill after CANCEL_GRACE.
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 1}
    ran.clear()
    task = CancelProbe.enqueue(Step(replace=False))

    child = Child(get_broker(), ["default"], CanceledAsItStarts(1), 0, os.getppid())
    child.run()

    assert ran == []
    key = f"{redis_ns.namespace}:{{default}}:t:{task.id}"
    assert redis_ns.client.hget(key, "state") == b"canceled"
