"""`async def run` handlers outside the async worker: inline mode, the test helpers, and a worker
child running one task at a time (here, on this thread, as in test_child_alarm.py).

An interrupt (the child's alarm) reaches the coroutine at its await, as the error itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

import pytest

import django_jobs
from django_jobs import CancelOutcome, coroutines
from django_jobs.client import get_broker
from django_jobs.exceptions import JobCanceled, JobTimeout
from django_jobs.idempotency import current_task
from django_jobs.inspector import get_inspector
from django_jobs.jobs import Job
from django_jobs.keys import State
from django_jobs.testing import capture_jobs
from django_jobs.worker.child import LOST_SIGNAL, Child
from django_jobs.worker.slots import SlotTable
from tests.conftest import RedisNamespace, wait_until
from tests.integration.test_child_alarm import restored_signals  # noqa: F401 (a fixture)

#: What the handlers saw, in order.
seen: list[str] = []


@dataclass(frozen=True)
class Nap:
    tag: str
    seconds: float = 0.0
    fail: bool = False


class AsyncNap(Job[Nap]):
    name = "tests.AsyncNap"

    async def run(self, payload: Nap) -> None:
        marked = current_task.get()
        try:
            await asyncio.sleep(payload.seconds)
        except (JobTimeout, JobCanceled) as exc:
            seen.append(f"{payload.tag}: caught {type(exc).__name__}: {exc}")
            raise
        if payload.fail:
            raise RuntimeError(f"{payload.tag} failed")
        seen.append(f"{payload.tag}: done as {marked and marked[1] == self.context.job_id}")


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


def test_inline__an_async_job_runs_to_completion_now(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": "inline"}

    handle = AsyncNap.enqueue(Nap("inline", seconds=0.01))

    assert handle.state == "completed"
    assert seen == ["inline: done as True"]


def test_inline__an_async_job_that_raises_is_dead(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": "inline"}

    assert AsyncNap.enqueue(Nap("boom", fail=True)).state == "dead"


def test_inline__from_code_that_runs_an_event_loop(settings: Any) -> None:
    # An enqueue from async code: the handler's coroutine cannot run on that loop (it is busy
    # with the caller), so it runs on a thread of its own, and the enqueue returns after it.
    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": "inline"}

    async def view() -> str:
        return AsyncNap.enqueue(Nap("from-loop")).state

    assert asyncio.run(view()) == "completed"
    assert seen == ["from-loop: done as True"]


def test_capture_jobs__run_all_awaits_async_handlers() -> None:
    with capture_jobs() as jobs:
        AsyncNap.enqueue(Nap("captured"))

    jobs.run_all()

    assert seen == ["captured: done as True"]


def test_atomic_async_job__is_refused_where_it_is_declared() -> None:
    with pytest.raises(TypeError, match="atomic = True needs a plain `def run`"):

        class AtomicAsync(Job[Nap]):
            name = "tests.AtomicAsync"
            atomic = True

            async def run(self, payload: Nap) -> None:
                pass


def test_run__an_interrupt_in_loop_code_reaches_the_coroutine_at_its_await() -> None:
    # As the alarm does: a signal handler raises JobTimeout while the loop waits in select().
    def alarm(signum: int, frame: Any) -> None:
        raise JobTimeout("timed out after 0.05 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(JobTimeout, match=r"timed out after 0\.05 s"):
            coroutines.run(AsyncNap(None).run(Nap("alarm", seconds=30)))  # type: ignore[arg-type]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert seen == ["alarm: caught JobTimeout: timed out after 0.05 s"]


def test_cancelling__is_the_error_and_a_cancellation() -> None:
    thrown = coroutines.cancelling(JobTimeout("timed out after 1 s"))

    assert isinstance(thrown, JobTimeout)
    assert isinstance(thrown, asyncio.CancelledError)
    assert (type(thrown).__name__, str(thrown)) == ("JobTimeout", "timed out after 1 s")


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_child__an_async_job_times_out_at_its_await_and_is_retried(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 2}
    slow = AsyncNap.enqueue(Nap("slow", seconds=30), timeout=0.2, max_attempts=2)
    AsyncNap.enqueue(Nap("quick"))

    child = Child(get_broker(), ["default"], SlotTable(1), 0, os.getppid())
    child.run()

    assert seen == ["slow: caught JobTimeout: timed out after 0.2 s", "quick: done as True"]
    task = get_inspector().task("default", slow.id)
    assert (task.state, task.attempts, task.error) == (
        "retry", 1, "JobTimeout: timed out after 0.2 s"
    )  # fmt: skip


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_child__an_async_job_sees_its_cancel_at_its_await_and_ends_canceled(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 1}
    handle = AsyncNap.enqueue(Nap("canceled", seconds=30))
    table = SlotTable(1)
    child = Child(get_broker(), ["default"], table, 0, os.getppid())

    def cancel() -> None:
        # As an operator and the supervisor do: mark the task, mark the run, signal the child.
        running = wait_until(lambda: table.get(0))
        assert django_jobs.cancel(handle.id) is CancelOutcome.REQUESTED
        table.mark_canceled(0, running)
        os.kill(os.getpid(), LOST_SIGNAL)

    thread = threading.Thread(target=cancel, daemon=True)
    thread.start()
    child.run()
    thread.join(timeout=5)

    assert seen == [f"canceled: caught JobCanceled: task {handle.id} was canceled: run interrupted"]
    assert get_inspector().task("default", handle.id).state == State.CANCELED
