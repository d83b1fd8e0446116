"""A Redis outage under a worker: a bounded log and work after it while it is shorter than the
lease; past the lease, the worker stops (exit code 75) instead of running headless; and a Redis
that stops answering while the supervisor reaps a timed-out child does not stop the worker.

Found trying it (issue 12): about 93 lines a second during an outage, a traceback on every
forwarder, heartbeat and recoverer tick and on every child's retry. Issue 13: the timeout reap
read the task with a raw client call, whose error stopped the whole worker.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django_jobs.worker.supervisor import HEADLESS
from testproject.probes.jobs import HoldGilOnce, Sleep, Work
from tests.acceptance.conftest import Worker, done, probe
from tests.conftest import RedisNamespace, RedisServer, wait_until

CHILDREN = 3
#: Seconds Redis stays down: with ~93 lines a second, the old worker logged hundreds.
OUTAGE = 6
#: Seconds Redis is paused around a timed-out child's reap.
PAUSE = 18


def test_runworker__redis_outage_logs_a_bounded_number_of_lines_then_work_resumes(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given an idle worker with several children alone on a Redis of its own
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url}
    worker.url = private_redis.url
    # (a lease longer than the outage: past the lease, the worker stops, as the next test shows)
    worker.start("--concurrency", str(CHILDREN), LEASE=3 * OUTAGE)
    client = private_redis.client()
    wait_until(lambda: " ready: " in worker.output(), timeout=20, why=worker.output)
    wait_until(lambda: sum("b" in c["flags"] for c in client.client_list()) == CHILDREN)
    before = len(worker.output().splitlines())

    # When Redis is down for OUTAGE seconds, then back (empty: it keeps nothing on disk)
    private_redis.stop()
    since = time.monotonic()
    wait_until(lambda: time.monotonic() - since > OUTAGE, timeout=OUTAGE + 5, interval=0.2)
    private_redis.start()
    on_private = RedisNamespace(private_redis.url, redis_ns.namespace, client)
    Sleep.enqueue(Work("after"))

    # Then work resumes...
    wait_until(lambda: done(on_private) == ["after:1:0"], timeout=30, why=worker.output)
    # ...and the log said so in a few lines: down and back once for the supervisor's loops and
    # once per child (each back within its longest back-off), the task's own line, no traceback
    wait_until(
        lambda: worker.output().count("Redis reachable again") == 1 + CHILDREN,
        timeout=15, why=worker.output,
    )  # fmt: skip
    lines = worker.output().splitlines()[before:]
    assert len(lines) <= 5 + 2 * CHILDREN, "\n".join(lines)
    assert not [line for line in lines if "Traceback" in line], "\n".join(lines)
    assert sum("Redis unreachable" in line for line in lines) <= 1 + CHILDREN


def test_runworker__heartbeat_failing_past_the_lease_stops_the_worker(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given a worker alone on a Redis of its own (a lease of 3 s), running a long task
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url}
    worker.url = private_redis.url
    worker.start("--concurrency", "2")
    client = private_redis.client()
    Sleep.enqueue(Work("long", seconds=600))
    started = wait_until(lambda: client.hget(probe(redis_ns, "started"), "long"), timeout=20)
    child = int(started.decode().split(":")[0])

    # When Redis goes away for longer than the lease
    private_redis.stop()

    # Then the worker stops by itself, non-zero, saying why in one line, and its running child
    # is gone with it (the task's lease is gone: it runs again once recovered)
    assert worker.wait(timeout=30) == HEADLESS, worker.output()
    lines = [line for line in worker.output().splitlines() if "stopping now" in line]
    assert len(lines) == 1, worker.output()
    assert f"(exit code {HEADLESS}): heartbeat failed" in lines[0]
    assert "(longer than 3s)" in lines[0]
    assert "Traceback" not in worker.output()
    try:
        os.kill(child, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"child {child} outlived its worker")


def test_runworker__redis_paused_while_a_timed_out_child_is_reaped_keeps_the_worker_running(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given a task stuck in C code past its timeout (its child is killed 4 + 1 s into the run),
    # on a worker alone on a Redis of its own whose calls give up after 11 s (1 s, plus the
    # child's 5 s wait, tried twice), and whose loops tick at its start and not again before
    # Redis is back (so that the reap is the call that meets the paused Redis)
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url}
    worker.url = private_redis.url
    client = private_redis.client()
    on_private = RedisNamespace(private_redis.url, redis_ns.namespace, client)
    slow = {"HEARTBEAT_INTERVAL": 30, "RECOVERER_INTERVAL": 30, "FORWARDER_INTERVAL": PAUSE + 7}
    worker.start("--concurrency", "1", LEASE=90, ENQUEUE_TIMEOUT=1, **slow)
    # (the loops' first ticks are done once the worker says it is ready)
    wait_until(lambda: " ready: " in worker.output(), timeout=20, why=worker.output)
    HoldGilOnce.enqueue(Work("stuck"), timeout=4)
    wait_until(lambda: client.llen(probe(redis_ns, "runs")) == 1, timeout=20, why=worker.output)

    # When Redis stops answering (CLIENT PAUSE) from before the kill until after the reap's
    # write has given up
    client.client_pause(PAUSE * 1000, all=True)
    wait_until(lambda: "could not write what becomes of it" in worker.output(), timeout=PAUSE,
               why=worker.output)  # fmt: skip

    # Then the worker keeps running, and once Redis is back the decision is written (a retry,
    # an attempt spent) and the task runs again and completes
    wait_until(lambda: done(on_private) == ["stuck:2:0"], timeout=30, why=worker.output)
    assert worker.process is not None
    assert worker.process.poll() is None, worker.output()
    assert "Traceback" not in worker.output()
    assert "killed after the timeout's grace; now retry (written once Redis answered)" in (
        worker.output()
    )
