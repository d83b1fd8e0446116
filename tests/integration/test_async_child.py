"""The async child (worker/async_child.py) run here, on this thread, as test_child_alarm.py runs a
one-task child: what the supervisor's signal does to one of its runs, and its stop."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs.client import get_broker
from django_jobs.exceptions import LeaseLost
from django_jobs.inspector import get_inspector
from django_jobs.jobs import Job
from django_jobs.worker.async_child import AsyncChild
from django_jobs.worker.child import LOST_SIGNAL
from django_jobs.worker.slots import SlotTable
from testproject.probes.models import Effect
from tests.conftest import RedisNamespace, wait_until
from tests.integration.test_child_alarm import restored_signals  # noqa: F401 (a fixture)

#: What the handlers saw, in order.
seen: list[str] = []
#: The tags whose handler is inside its try (a lease lost before then is not seen by it).
holding: set[str] = set()


@dataclass(frozen=True)
class Hold:
    tag: str
    seconds: float = 60.0


class AsyncHold(Job[Hold]):
    name = "tests.AsyncHold"

    async def run(self, payload: Hold) -> None:
        try:
            holding.add(payload.tag)
            await asyncio.sleep(payload.seconds)
        except LeaseLost as exc:
            seen.append(f"{payload.tag}: {type(exc).__name__}")
            raise
        if payload.tag.startswith("db"):  # the async ORM, as an async view uses it
            await Effect.objects.acreate(key=payload.tag, pid=os.getpid())
        seen.append(f"{payload.tag}: done")


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()
    holding.clear()


def meanwhile(action: Callable[[], None]) -> threading.Thread:
    """Run action on a thread while the child runs on this one (a signal it sends reaches this,
    the main, thread)."""
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_async_child__lost_lease_interrupts_that_run_only_and_writes_nothing(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 2}
    lost = AsyncHold.enqueue(Hold("lost"))
    AsyncHold.enqueue(Hold("kept", seconds=0.3))
    table = SlotTable(2)
    child = AsyncChild(get_broker(), ["default"], table, range(2), os.getppid())

    def lose() -> None:
        # As the supervisor does: mark the run lost in its slot, then signal the child.
        def published() -> Any:
            return next((r for i in range(2) if (r := table.get(i)) and r.task_id == lost.id), 0)

        running = wait_until(published)
        wait_until(lambda: "lost" in holding)  # its handler awaits inside its try
        table.mark_lost(next(i for i in range(2) if table.get(i) == running), running)
        os.kill(os.getpid(), LOST_SIGNAL)

    thread = meanwhile(lose)
    child.run()
    thread.join(timeout=5)

    assert sorted(seen) == ["kept: done", "lost: LeaseLost"]
    # Nothing was written for the lost run: the task is another worker's now.
    assert get_inspector().task("default", lost.id).state == "active"


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_async_child__idle_child_stops_at_once_on_sigterm(redis_ns: RedisNamespace) -> None:
    child = AsyncChild(get_broker(), ["default"], SlotTable(4), range(4), os.getppid())

    def stop() -> None:
        wait_until(lambda: child.waiter.busy)  # blocked on Redis for work
        os.kill(os.getpid(), signal.SIGTERM)

    thread = meanwhile(stop)
    begun = time.monotonic()
    child.run()
    thread.join(timeout=5)

    assert time.monotonic() - begun < 2  # not the wait's 5 s: the stop cut it short


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_async_child__takes_no_more_tasks_than_it_may_run_before_it_retires(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    # Given four slots but two tasks left before the child retires
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 2}
    handles = AsyncHold.enqueue_many([Hold(f"t{i}", seconds=0) for i in range(4)])
    child = AsyncChild(get_broker(), ["default"], SlotTable(4), range(4), os.getppid())

    child.run()

    # Then it ran two and left the other two pending for another child
    states = sorted(get_inspector().task("default", h.id).state for h in handles)
    assert states == ["completed", "completed", "pending", "pending"]


@pytest.mark.usefixtures("restored_signals")
@pytest.mark.django_db(transaction=True)
def test_async_child__runs_use_the_async_orm_between_closes_of_stale_connections(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_TASKS_PER_CHILD": 3}
    AsyncHold.enqueue_many([Hold(f"db{i}", seconds=0) for i in range(3)])
    child = AsyncChild(get_broker(), ["default"], SlotTable(3), range(3), os.getppid())

    child.run()

    assert sorted(Effect.objects.values_list("key", flat=True)) == ["db0", "db1", "db2"]
