"""`manage.py runworker` end to end: bounds, timeouts, crashes, shutdown, Redis restarts.

Each test drives a real worker process and polls Redis with a deadline; none sleeps to wait.
"""

import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_jobs import keys
from django_jobs.inspector import get_inspector
from django_jobs.worker.child import WAIT
from testproject.probes.jobs import (
    BusyLoop,
    CrashOnce,
    HoldGil,
    Sleep,
    SleepForever,
    SocketRead,
    Work,
)
from tests.acceptance.conftest import Worker, done, probe, started
from tests.conftest import RedisNamespace, RedisServer, wait_until


def task_state(task_id: str, queue: str = "default") -> Any:
    return get_inspector().task(queue, task_id)


def test_runworker__never_runs_more_than_concurrency(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given three slow jobs and two slots
    Sleep.enqueue_many([Work(f"s{i}", seconds=0.5) for i in range(3)])

    worker.start("--concurrency", "2")

    # Then all three run, never more than two at once
    wait_until(lambda: len(done(redis_ns)) == 3, timeout=30)
    assert redis_ns.client.get(probe(redis_ns, "max_running")) == b"2"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections and never sends a byte."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_runworker__every_kind_of_timeout_frees_its_slot(
    worker: Worker, redis_ns: RedisNamespace, silent_port: int
) -> None:
    # Given one slot and four jobs that never finish on their own, then a quick one
    stuck = [
        BusyLoop.enqueue(Work("busy"), timeout=1, max_attempts=1),
        SleepForever.enqueue(Work("sleep"), timeout=1, max_attempts=1),
        SocketRead.enqueue(Work("socket", seconds=silent_port), timeout=1, max_attempts=1),
        HoldGil.enqueue(Work("gil"), timeout=1, max_attempts=1),
    ]
    Sleep.enqueue(Work("after"))

    worker.start("--concurrency", "1")

    # Then each is interrupted (the C call only by killing its child), and the slot is reused
    wait_until(lambda: done(redis_ns) == ["after:1:0"], timeout=60)
    for handle in stuck:
        task = task_state(handle.id)
        assert task.state == "dead", (handle.job, worker.output())
        assert "timed out after 1 s" in task.error
    gil = task_state(stuck[-1].id)
    assert "killed after the grace period" in gil.error


def test_runworker__timeout_is_retried_with_an_attempt_spent(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    handle = SleepForever.enqueue(Work("sleep"), timeout=0.5, max_attempts=2)

    worker.start("--concurrency", "1")

    # Both runs time out, each spending an attempt: retried once, then dead
    wait_until(lambda: task_state(handle.id).state == "dead", timeout=30, why=worker.output)
    task = task_state(handle.id)
    assert (task.attempts, task.crashes) == (2, 0)
    assert task.error == "JobTimeout: timed out after 0.5 s"
    # Each outcome is logged just after it is written: wait for the second line.
    wait_until(lambda: worker.output().count("JobTimeout: timed out after 0.5 s") == 2)


def test_runworker__killed_child_task_comes_back_without_spending_an_attempt(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a job whose process dies under it on the first run
    CrashOnce.enqueue(Work("crash"))

    worker.start("--concurrency", "2")

    # Then it runs again at once in a new child, as attempt 1 with one crash counted
    wait_until(lambda: done(redis_ns) == ["crash:1:1"], timeout=20)
    assert "died (killed by SIGKILL) while running it" in worker.output()


def test_runworker__kill_9_of_a_child_mid_task(worker: Worker, redis_ns: RedisNamespace) -> None:
    handle = Sleep.enqueue(Work("slow", seconds=1))
    worker.start("--concurrency", "1")
    pid = started(redis_ns, "slow")

    os.kill(pid, signal.SIGKILL)

    wait_until(lambda: done(redis_ns) == ["slow:1:1"], timeout=20)
    assert task_state(handle.id).attempts == 0


def test_runworker__sigterm_lets_the_running_task_finish(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    handle = Sleep.enqueue(Work("slow", seconds=1))
    worker.start("--concurrency", "1")
    started(redis_ns, "slow")

    worker.signal(signal.SIGTERM)

    assert worker.wait(timeout=20) == 0
    assert done(redis_ns) == ["slow:1:0"]
    assert task_state(handle.id).state == "completed"


def start_alone(worker: Worker, server: RedisServer, settings: Any) -> redis.Redis:
    """Start a 2-child worker on a Redis of its own (this test's too); return a client of it."""
    settings.JOBS = {**settings.JOBS, "REDIS_URL": server.url}
    worker.url = server.url
    worker.start("--concurrency", "2")
    return server.client()


def test_runworker__idle_worker_stops_at_once_on_sigterm(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given an idle worker alone on a Redis of its own, both children blocked on it for work
    # (a blocked wait lasts up to WAIT seconds)
    client = start_alone(worker, private_redis, settings)

    def blocked() -> int:
        return sum("b" in c["flags"] for c in client.client_list())

    wait_until(lambda: blocked() == 2, timeout=20, why=worker.output)

    # When it is told to stop
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)

    # Then it exits cleanly at once. A blocked wait left to time out by itself ends within
    # WAIT (5 s) seconds at a random point: both would end within 1.5 s about 1 time in 11.
    assert worker.wait(timeout=20) == 0, worker.output()
    assert time.monotonic() - sent < 1.5 < WAIT / 3, worker.output()


def test_runworker__shutdown_timeout_puts_the_task_back_unspent(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    handle = Sleep.enqueue(Work("long", seconds=60))
    worker.start("--concurrency", "1", "--shutdown-timeout", "0.5")
    started(redis_ns, "long")

    worker.signal(signal.SIGTERM)

    assert worker.wait(timeout=20) == 0
    task = task_state(handle.id)
    assert (task.state, task.attempts, task.crashes) == ("pending", 0, 0)


def test_runworker__burst_drains_and_exits_0(worker: Worker, redis_ns: RedisNamespace) -> None:
    Sleep.enqueue_many([Work(f"b{i}") for i in range(20)])

    worker.start("--concurrency", "2", "--burst")

    assert worker.wait(timeout=30) == 0, worker.output()
    assert sorted(done(redis_ns)) == sorted(f"b{i}:1:0" for i in range(20))


def test_runworker__survives_redis_restarting_under_it(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given a worker on a Redis of the test's own
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url}
    worker.url = private_redis.url
    worker.start("--concurrency", "1")
    Sleep.enqueue(Work("before"))
    wait_until(lambda: done(redis_ns_on(private_redis, redis_ns)) == ["before:1:0"], timeout=20)

    # When Redis restarts (and, keeping nothing on disk, forgets everything)
    private_redis.restart()
    Sleep.enqueue(Work("after"))

    # Then the same worker takes new work
    wait_until(lambda: done(redis_ns_on(private_redis, redis_ns)) == ["after:1:0"], timeout=30)
    assert worker.process is not None
    assert worker.process.poll() is None


def redis_ns_on(server: RedisServer, ns: RedisNamespace) -> RedisNamespace:
    return RedisNamespace(server.url, ns.namespace, server.client())


def test_runworker__recycles_children_after_max_tasks(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    Sleep.enqueue_many([Work(f"r{i}") for i in range(3)])

    worker.start("--concurrency", "1", "--max-tasks-per-child", "1", "--burst")

    assert worker.wait(timeout=30) == 0, worker.output()
    pids = {v.decode().split(":")[0] for v in redis_ns.client.hvals(probe(redis_ns, "started"))}
    assert len(pids) == 3
    assert len(done(redis_ns)) == 3


def test_runworker__idle_worker_wakes_within_milliseconds_and_stays_quiet(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given a worker alone on a Redis of its own, idle
    client = start_alone(worker, private_redis, settings)
    wait_until(lambda: client.zcard(keys.workers(redis_ns.namespace)), timeout=20)

    def commands() -> int:
        return sum(int(v["calls"]) for v in client.info("commandstats").values())

    # When it has nothing to do for a few seconds
    before, since = commands(), time.monotonic()
    wait_until(lambda: time.monotonic() - since > 3, timeout=5, interval=0.5)
    per_second = (commands() - before - 1) / (time.monotonic() - since)

    # Then it sends a few round trips a second, not a busy poll (thousands). Counted here are
    # the commands inside scripts too, with this test's fast profile (every loop ticks each
    # second) over a default worker's five queues: about 87 a second measured on a quiet
    # machine, 103 once at load 9; a busy poll is thousands.
    assert per_second < 300, per_second
    # ...and still picks up a job at once
    on_private = redis_ns_on(private_redis, redis_ns)
    sent = time.monotonic()
    Sleep.enqueue(Work("wake"))
    wait_until(lambda: done(on_private) == ["wake:1:0"], timeout=5, interval=0.005)
    assert time.monotonic() - sent < 1.0


def test_runworker__whole_worker_killed_its_task_comes_back_after_the_lease(
    worker: Worker, redis_ns: RedisNamespace, tmp_path: Any
) -> None:
    # Given a worker (LEASE 3 s) running a slow task
    handle = Sleep.enqueue(Work("orphaned", seconds=2))
    worker.start("--concurrency", "1")
    started(redis_ns, "orphaned")

    # When the whole worker dies at once (supervisor and child)
    worker.kill()

    # Then a second worker gets the task once its lease has expired, as a crash, not a failure
    second = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "second.log").start(
        "--concurrency", "1"
    )
    try:
        wait_until(lambda: done(redis_ns) == ["orphaned:1:1"], timeout=30, why=second.output)
    finally:
        second.kill()
    assert task_state(handle.id).attempts == 0
