"""Limits per job type across real `runworker` processes (issue 21): two workers never run more
of a job type at once than its concurrency_limit, nor start more per window than its
rate_limit, while another job type's tasks keep flowing; a worker killed (-9, whole) while it
holds a slot gives it back within its lease; no waiting task spends an attempt."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testproject.probes.jobs import Capped, CappedOnce, Paced, Sleep, Work
from tests.acceptance.conftest import FAST, Worker, done, probe, started
from tests.conftest import RedisNamespace, wait_until


def listed(ns: RedisNamespace, name: str) -> list[str]:
    return [item.decode() for item in ns.client.lrange(probe(ns, name), 0, -1)]


@pytest.fixture
def other(redis_ns: RedisNamespace, tmp_path: Path) -> Iterator[Worker]:
    """A second runworker on the same namespace."""
    process = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "other.log")
    yield process
    process.kill()


def test_limits__hold_across_two_workers_under_load_and_other_job_types_flow(
    worker: Worker, other: Worker, redis_ns: RedisNamespace
) -> None:
    # Given 6 tasks of a job type capped at 2 at once, 10 of one allowed 4 starts a second, and
    # 12 of a job type without limits queued behind them
    Capped.enqueue_many([Work(f"c{i}", seconds=0.3) for i in range(6)])
    Paced.enqueue_many([Work(f"p{i}") for i in range(10)])
    Sleep.enqueue_many([Work(f"s{i}") for i in range(12)])

    # When two workers with 3 slots each drain the queue
    worker.start("--concurrency", "3")
    other.start("--concurrency", "3")

    # Then the unlimited tasks all ran while the capped ones still waited their turn
    wait_until(lambda: len(done(redis_ns)) == 12, timeout=30, why=worker.output)
    assert len(listed(redis_ns, "capped_done")) <= 4
    # And the capped ones all ran, 2 at once at most, none spending an attempt for the wait
    wait_until(lambda: len(listed(redis_ns, "capped_done")) == 6, timeout=30, why=other.output)
    assert redis_ns.client.get(probe(redis_ns, "capped_most")) == b"2"
    assert sorted(listed(redis_ns, "capped_done")) == sorted(f"c{i}:1:0" for i in range(6))
    # And the paced ones all ran at their first attempt, no second admitting more than 4 starts
    wait_until(lambda: len(listed(redis_ns, "paced")) == 10, timeout=30, why=worker.output)
    runs = [entry.split(":") for entry in listed(redis_ns, "paced")]
    assert sorted(tag for tag, _, _ in runs) == sorted(f"p{i}" for i in range(10))
    assert {attempt for _, attempt, _ in runs} == {"1"}
    windows: dict[int, int] = {}
    for _, _, started_at in runs:
        window = math.floor(float(started_at))
        windows[window] = windows.get(window, 0) + 1
    assert max(windows.values()) <= 4, windows
    assert len(windows) >= 3, windows


def test_concurrency_limit__a_worker_killed_holding_a_slot_gives_it_back_within_its_lease(
    worker: Worker, other: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a worker running the one task its job type allows at once
    CappedOnce.enqueue(Work("holder", seconds=60))
    worker.start("--concurrency", "2")
    started(redis_ns, "holder")
    # and another worker, with a second task of that type parked for want of the slot
    other.start("--concurrency", "2")
    waiting = CappedOnce.enqueue(Work("waiting"))
    parked = f"{redis_ns.namespace}:{{default}}:parked:{CappedOnce.name}"
    wait_until(lambda: redis_ns.client.lrange(parked, 0, -1) == [waiting.id.encode()],
               timeout=10, why=other.output)  # fmt: skip

    # When the first worker is killed, whole, with kill -9
    for pid in [*worker.children(), worker.pid]:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()

    # Then the slot comes back once the lease has passed: both tasks run on the other worker,
    # the waiting one at its first attempt, the killed one with its crash counted, no attempt
    wait_until(lambda: len(listed(redis_ns, "capped_once_done")) == 2, timeout=20,
               why=other.output)  # fmt: skip
    within = time.monotonic() - killed
    assert sorted(listed(redis_ns, "capped_once_done")) == ["holder:1:1", "waiting:1:0"]
    assert within < FAST["LEASE"] + 2 * FAST["RECOVERER_INTERVAL"] + 3, within
    assert redis_ns.client.llen(parked) == 0
