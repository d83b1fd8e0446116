"""Redis behind Sentinel (issue 20): JOBS['REDIS_URL'] = 'redis+sentinel://...' reaches the
primary through redis-py's Sentinel, and a worker follows a SENTINEL FAILOVER to the new primary
while tasks are enqueued and drained. What became of every enqueue is counted and printed (run
with -s to see the table docs/scale-redis.rst quotes).

A manual failover leaves the old primary a primary until the sentinel's next look at it (up to
10 s): clients connected to it go on writing there, and what they wrote is gone when it becomes a
replica. With min-replicas-to-write 1 it refuses writes a second after its replica left, so what
an enqueue acknowledged is never lost; without, it may be (counted, not asserted).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.worker.loop import JITTER, MOST
from testproject.probes.jobs import Sleep, Work
from tests.acceptance.conftest import Worker
from tests.conftest import wait_until
from tests.sentinel import UNGUARDED, SentinelSetup, sentinel_setup  # noqa: F401 (the fixture)

#: Tasks enqueued before the failover, during it (the old primary not yet demoted), after it.
BEFORE, DURING, AFTER = 150, 100, 50
#: Seconds with nothing more done after which the missing tasks count as lost: longer than a
#: worker child's longest back-off (worker.loop.MOST, 5 s, plus its jitter), or a child still
#: waiting out its back-off from the refusals (NOREPLICAS) counts its tasks as lost.
STALL = MOST * (1 + JITTER) + 2


@pytest.mark.parametrize(
    "sentinel_setup",
    [1, pytest.param(0, marks=UNGUARDED)],
    indirect=True,
    ids=["min-replicas-1", "unguarded"],
)
def test_runworker__follows_a_sentinel_failover(
    sentinel_setup: SentinelSetup,  # noqa: F811
    tmp_path: Path,
    settings: Any,
) -> None:
    # Given a worker and this process on the Sentinel URL, the worker draining a backlog
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    url = sentinel_setup.url
    settings.JOBS = {**getattr(settings, "JOBS", {}), "REDIS_URL": url, "NAMESPACE": namespace}
    plain = f"redis://127.0.0.1:{sentinel_setup.primary.port}/0"  # the cache's, unused
    worker = Worker(plain, namespace, tmp_path / "worker.log")
    # (a lease longer than the sentinel takes to demote the old primary: up to 10 s)
    worker.start("--concurrency", "2", REDIS_URL=url, LEASE=30)
    try:
        acknowledged: dict[str, str] = {}  # tag: job id
        refused = 0

        def enqueue(tag: str) -> None:
            nonlocal refused
            try:
                acknowledged[tag] = Sleep.enqueue(Work(tag, seconds=0.01)).id
            except BrokerUnavailable:  # BrokerRefused too (NOREPLICAS, READONLY)
                refused += 1  # the caller was told: not acknowledged, so not lost

        for n in range(BEFORE):
            enqueue(f"a{n}")
        done_key = f"{namespace}:probe:done"
        wait_until(lambda: get_broker().client.llen(done_key) >= 20, timeout=30, why=worker.output)

        # When the sentinel switches the replica in while tasks are enqueued and drained
        since = time.monotonic()
        new, former = sentinel_setup.failover()
        for n in range(DURING):
            enqueue(f"b{n}")
        sentinel_setup.demoted(former)
        demoted = time.monotonic() - since
        for n in range(AFTER):
            enqueue(f"c{n}")

        # Then the worker follows the new primary: what was enqueued after the switch runs...
        direct = new.client()
        seen = [-1, time.monotonic()]  # done's length, and since when it has not grown

        def drained() -> bool:
            # every acknowledged task done, or nothing more done for STALL s (then count the lost)
            length = int(direct.llen(done_key))
            if length >= len(acknowledged):
                return True
            if length != seen[0]:
                seen[:] = [length, time.monotonic()]
            return time.monotonic() - seen[1] > STALL

        wait_until(drained, timeout=60, interval=0.05, why=worker.output)
        took = time.monotonic() - since
        ran = {item.decode().split(":")[0] for item in direct.lrange(done_key, 0, -1)}
        lost = sorted(tag for tag in acknowledged if tag not in ran)
        log = worker.output()
        runs = Counter(
            line.split()[1]
            for line in log.splitlines()
            if line.endswith("s)") and "completed" in line
        )
        duplicated = sum(1 for job_id in acknowledged.values() if runs[job_id] > 1)
        print(
            f"\nsentinel failover ({sentinel_setup.min_replicas} min-replicas-to-write): "
            f"enqueued {BEFORE + DURING + AFTER}, acknowledged {len(acknowledged)}, refused "
            f"{refused}, lost {len(lost)}, ran twice {duplicated}; old primary demoted after "
            f"{demoted:.1f}s, drained after {took:.1f}s"
        )
        assert [tag for tag in lost if tag.startswith("c")] == []
        assert worker.process is not None
        assert worker.process.poll() is None, log
        # ...and with min-replicas-to-write, nothing an enqueue acknowledged is lost
        if sentinel_setup.min_replicas:
            assert lost == []
    finally:
        worker.kill()
        get_broker().client.connection_pool.disconnect()


def test_runworker__on_sentinel_an_idle_worker_stops_at_once_on_sigterm(
    sentinel_setup: SentinelSetup,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Given an idle worker on the Sentinel URL, both children blocked on the primary for work
    url = sentinel_setup.url
    plain = f"redis://127.0.0.1:{sentinel_setup.primary.port}/0"  # the cache's, unused
    worker = Worker(plain, f"test-{uuid.uuid4().hex[:12]}", tmp_path / "worker.log")
    worker.start("--concurrency", "2", REDIS_URL=url)
    try:
        primary = sentinel_setup.primary.client()
        wait_until(
            lambda: sum("b" in c["flags"] for c in primary.client_list()) == 2,
            timeout=20, why=worker.output,
        )  # fmt: skip

        # When it is told to stop
        sent = time.monotonic()
        worker.signal(signal.SIGTERM)

        # Then it exits at once: each child's handler unblocked its wait through a connection
        # to the primary the sentinels name (a wait left to time out lasts up to 5 s)
        assert worker.wait(timeout=20) == 0, worker.output()
        assert time.monotonic() - sent < 1.5, worker.output()
    finally:
        worker.kill()
