"""Runs that lose their lease: interrupted, nothing written, never run twice at once on a worker.

Found trying it (issue 12): after a Redis outage longer than LEASE, a live worker recovered its
own running task and ran it in both of its slots until the stale run timed out; and a lost
lease was only logged, the run went on.
"""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from django_jobs import keys
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from testproject.probes.jobs import Chaos, ChaosWork, CleanUp, HoldGil, Sleep, Work
from tests.acceptance.conftest import Worker, done, probe, started
from tests.conftest import RedisNamespace, RedisServer, wait_until


def recovered_elsewhere(task_id: str) -> None:
    """What another worker's recovery does to a task's record: its epoch moves on."""
    broker = get_broker()
    broker.client.hincrby(broker.keys("default").task(task_id), "epoch", 1)


def test_runworker__lost_lease_interrupts_the_run_and_writes_nothing(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a worker running a long task
    handle = Sleep.enqueue(Work("long", seconds=60))
    worker.start("--concurrency", "1")
    started(redis_ns, "long")

    # When another worker takes the task over (its lease was lost)
    recovered_elsewhere(handle.id)

    # Then the run is interrupted at the next heartbeat, and the child takes other work
    wait_until(lambda: "run interrupted, outcome not written" in worker.output(), timeout=10)
    Sleep.enqueue(Work("next"))
    wait_until(lambda: done(redis_ns) == ["next:1:0"], timeout=10, why=worker.output)
    # ...having written nothing for the lost run: the record is as the other worker left it
    task = get_inspector().task("default", handle.id)
    assert (task.state, task.attempts, task.crashes, task.error) == ("active", 0, 0, None)
    assert f"task {handle.id}: run interrupted (lease lost); nothing written" in worker.output()


def test_runworker__a_second_lost_lease_signal_does_not_cut_the_cleanup_short(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a run interrupted for its lost lease, cleaning up in its except block
    handle = CleanUp.enqueue(Work("tidy", seconds=0.5))
    worker.start("--concurrency", "1")
    pid = started(redis_ns, "tidy")
    recovered_elsewhere(handle.id)
    wait_until(lambda: redis_ns.client.lrange(probe(redis_ns, "cleaning"), 0, -1), timeout=10)

    # When the signal comes again (a supervisor catching up on ticks it missed while frozen)
    os.kill(pid, signal.SIGUSR1)

    # Then LeaseLost is not raised a second time: the cleanup finishes, nothing written
    wait_until(
        lambda: redis_ns.client.lrange(probe(redis_ns, "cleaned"), 0, -1) == [b"tidy"],
        timeout=10,
        why=worker.output,
    )
    wait_until(lambda: "nothing written for it" in worker.output(), timeout=10)


def test_runworker__lost_lease_in_c_code_kills_the_child_after_the_grace(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a task inside one long C call (no signal handler runs until it returns)
    handle = HoldGil.enqueue(Work("gil"), timeout=300)
    worker.start("--concurrency", "1")
    started(redis_ns, "gil")

    recovered_elsewhere(handle.id)

    # Then its child is killed once the grace (1 s here) has passed, nothing written or put back
    wait_until(lambda: "nothing written for it" in worker.output(), timeout=15)
    Sleep.enqueue(Work("next"))
    wait_until(lambda: done(redis_ns) == ["next:1:0"], timeout=10, why=worker.output)
    task = get_inspector().task("default", handle.id)
    assert (task.state, task.attempts, task.crashes, task.error) == ("active", 0, 0, None)
    assert "did not stop within 1s of losing its lease: killing child" in worker.output()


def runs(log_dir: Path) -> dict[str, list[tuple[int, float, float | None]]]:
    """Each job id's runs from the Chaos job's logs: (pid, started, ended or None)."""
    out: dict[str, list[tuple[int, float, float | None]]] = {}
    for path in log_dir.glob("*.log"):
        open_runs: dict[str, int] = {}
        for line in path.read_text().splitlines():
            event, job_id, _n, _attempt, pid, at, *_ = line.split()
            if event == "start":
                out.setdefault(job_id, []).append((int(pid), float(at), None))
                open_runs[job_id] = len(out[job_id]) - 1
            elif event in ("done", "abort") and job_id in open_runs:
                index = open_runs.pop(job_id)
                pid_, began, _ = out[job_id][index]
                out[job_id][index] = (pid_, began, float(at))
    return out


def overlapping(job_runs: list[tuple[int, float, float | None]]) -> bool:
    spans = sorted((began, ended or float("inf")) for _pid, began, ended in job_runs)
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def test_runworker__redis_paused_past_the_lease_never_two_runs_at_once(
    worker: Worker,
    redis_ns: RedisNamespace,
    private_redis: RedisServer,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a worker with two slots on a Redis of its own, one running a task; its recoverer
    # looks often, its heartbeat less so (the recoverer is the likelier to be waiting on Redis
    # when it comes back)
    log_dir = tmp_path / "runs"
    log_dir.mkdir()
    monkeypatch.setenv("CHAOS_LOG_DIR", str(log_dir))
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url}
    worker.url = private_redis.url
    worker.start("--concurrency", "2", LEASE=2, HEARTBEAT_INTERVAL=0.6, RECOVERER_INTERVAL=0.1)
    handle = Chaos.enqueue(ChaosWork(n=1, seconds=8))
    wait_until(lambda: handle.id in runs(log_dir), timeout=20, why=worker.output)

    # When Redis stops answering for twice the lease
    private_redis.client().execute_command("CLIENT", "PAUSE", 4000, "ALL")

    # Then the run ends once, and at no moment did two runs of the task overlap on the worker
    wait_until(lambda: runs(log_dir)[handle.id][0][2] is not None, timeout=30, why=worker.output)
    assert not overlapping(runs(log_dir)[handle.id]), (runs(log_dir), worker.output())
    assert len(runs(log_dir)[handle.id]) == 1, worker.output()
    wait_until(lambda: get_inspector().task("default", handle.id).state == "completed")


def test_runworker__corrupt_workers_key_still_renews_leases(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a registry key of the wrong type (a clumsy operator): every beat fails
    redis_ns.client.set(keys.workers(redis_ns.namespace), "not a sorted set")
    # When a task runs for longer than the lease (3 s here)
    handle = Sleep.enqueue(Work("long", seconds=5))
    worker.start("--concurrency", "2")

    # Then its lease is renewed all along: it runs once, is never recovered, and completes
    wait_until(lambda: done(redis_ns) == ["long:1:0"], timeout=20, why=worker.output)
    wait_until(lambda: get_inspector().task("default", handle.id).state != "active", timeout=5)
    task = get_inspector().task("default", handle.id)
    assert (task.state, task.crashes) == ("completed", 0), worker.output()
    assert "its worker died (lease expired)" not in worker.output()
    assert worker.output().count("heartbeat tick failed") == 1, worker.output()
