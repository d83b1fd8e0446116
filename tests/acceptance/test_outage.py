"""A Redis outage under a worker: a bounded log, whatever its length, and work after it.

Found trying it (issue 12): about 93 lines a second during an outage, a traceback on every
forwarder, heartbeat and recoverer tick and on every child's retry.
"""

from __future__ import annotations

import time
from typing import Any

from testproject.probes.jobs import Sleep, Work
from tests.acceptance.conftest import Worker, done
from tests.conftest import RedisNamespace, RedisServer, wait_until

CHILDREN = 3
#: Seconds Redis stays down: with ~93 lines a second, the old worker logged hundreds.
OUTAGE = 6


def test_runworker__redis_outage_logs_a_bounded_number_of_lines_then_work_resumes(
    worker: Worker, redis_ns: RedisNamespace, private_redis: RedisServer, settings: Any
) -> None:
    # Given an idle worker with several children alone on a Redis of its own
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url}
    worker.url = private_redis.url
    # (a lease longer than the outage: past the lease, the worker stops, as the next test shows)
    worker.start("--concurrency", str(CHILDREN), LEASE=3 * OUTAGE)
    client = private_redis.client()
    wait_until(lambda: client.zcard(f"{redis_ns.namespace}:workers"), timeout=20)
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
