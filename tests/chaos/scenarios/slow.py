"""Scenario 14: a slow Redis. The proxy adds 50 ms to every command of the workers.

One worker drains a batch of short jobs on a direct connection, then a second worker drains a
batch as large through the proxy (DELAY before each chunk it relays to Redis), the first one
stopped. Throughput degrades (it is measured, both ways); correctness does not: nothing lost,
no duplicate (no fault took a lease), no run twice at once, every lease kept.
"""

from __future__ import annotations

import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run, Stage, Worker
from tests.chaos.processes import RedisServer
from tests.chaos.profiles import Profile
from tests.chaos.proxy import Proxy
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude

CONCURRENCY = 2
DELAY = 0.05


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "-"
    server = run.server("slow")
    proxy = Proxy(server.port, delay=DELAY).start()
    try:
        _slow(run, profile, result, server, proxy)
    finally:
        proxy.stop()
        server.stop()


def _slow(run: Run, profile: Profile, result: Result, server: RedisServer, proxy: Proxy) -> None:
    with run.stage("slow", server.url) as stage:
        fast = stage.worker("direct", CONCURRENCY).start().wait_ready()
        direct = drained(stage, fast, profile.slow_jobs)
        fast.stop_quietly()
        slow = stage.worker("slow", CONCURRENCY)
        slow.env = {"REDIS_URL": proxy.url}
        slow.start().wait_ready()
        delayed = drained(stage, slow, profile.slow_jobs)
        conclude(stage, result, drain=60)
        lost = slow.output().count("lost its lease")
        result.note(
            f"{profile.slow_jobs} jobs of 10 ms drained by one worker ({CONCURRENCY} children) "
            f"in {direct:.2f}s direct ({profile.slow_jobs / direct:.0f}/s), {delayed:.2f}s with "
            f"{DELAY * 1000:g} ms added per command ({profile.slow_jobs / delayed:.0f}/s); "
            f"{lost} lease(s) lost"
        )
        result.expect(not lost, f"{lost} lease(s) lost on a slow link: the lease is too tight")
        result.expect(delayed > direct, "the proxy's delay slowed nothing: it was not in the way")


def drained(stage: Stage, worker: Worker, count: int) -> float:
    """Enqueue count jobs of 10 ms, wait until they are all done; return the seconds taken."""
    began = time.monotonic()
    ids = set(stage.enqueue(count, lambda n: ChaosWork(n, seconds=0.01)))
    stage.drain(timeout=120, expect=ids)
    if not worker.alive:
        raise RuntimeError(f"worker {worker.name} exited:\n{worker.tail()}")
    return time.monotonic() - began
