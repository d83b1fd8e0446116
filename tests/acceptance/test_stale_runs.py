"""A task recovered and handed out again to the worker still running it: never two runs at once.

Found by the reliability battery's rule of no concurrent double run (scenarios 4 and 10): when
Redis came back after an outage longer than the lease, or a frozen worker thawed, another worker
recovered the task and a free child of the same worker fetched it at once, a moment before its
supervisor interrupted the stale run: the task ran in two slots of one worker for a few ms.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.worker.slots import Running, SlotTable
from testproject.probes.jobs import Chaos, ChaosWork
from tests.acceptance.conftest import Worker
from tests.acceptance.test_lease_lost import overlapping, runs
from tests.conftest import RedisNamespace, wait_until


def test_slots__held_elsewhere_sees_another_slot_only() -> None:
    table = SlotTable(3)
    table.set(1, Running("a" * 64, 0, "2", 0.0, 1.0))
    table.set(2, Running("b", 0, "1", 0.0, 1.0))

    assert table.held_elsewhere(0, "a" * 64)
    assert not table.held_elsewhere(1, "a" * 64)  # its own slot
    assert table.held_elsewhere(0, "b")
    assert not table.held_elsewhere(0, "bb")  # not a prefix match
    assert not table.held_elsewhere(0, "a")
    table.clear(1)
    assert not table.held_elsewhere(0, "a" * 64)


def test_runworker__task_recovered_to_its_own_worker_never_runs_twice_at_once(
    worker: Worker, redis_ns: RedisNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker with two slots, one running a long task, the other free
    log_dir = tmp_path / "runs"
    log_dir.mkdir()
    monkeypatch.setenv("CHAOS_LOG_DIR", str(log_dir))
    worker.start("--concurrency", "2")
    handle = Chaos.enqueue(ChaosWork(n=1, seconds=30))
    wait_until(lambda: handle.id in runs(log_dir), timeout=20, why=worker.output)

    # When another worker's recoverer finds its lease expired and puts it back in pending
    broker = get_broker()
    keys = broker.keys("default")
    broker.client.zadd(keys.lease, {handle.id: 0})
    assert broker.recover("default") == [(handle.id, "pending")]

    # Then the free child takes it, but starts it only once the stale run was interrupted
    wait_until(lambda: len(runs(log_dir)[handle.id]) == 2, timeout=20, why=worker.output)
    first, second = sorted(runs(log_dir)[handle.id], key=lambda run: run[1])
    assert first[2] is not None, (runs(log_dir), worker.output())  # interrupted, ended
    assert not overlapping(runs(log_dir)[handle.id]), (runs(log_dir), worker.output())
    assert second[2] is None  # the new run goes on, with its own lease
    task = get_inspector().task("default", handle.id)
    assert (task.state, task.crashes) == ("active", 1), worker.output()
