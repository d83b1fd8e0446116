"""A real `runworker` on a sharded queue, on one Redis (issue 20; broker/shards.py): idle
children woken by a task on any shard (one BLPOP over every shard's wake key), every shard
drained, a critical task still first, the worker registry showing the queue, not its shards.
The Cluster leg runs one on 3 masters (tests/cluster_leg/test_cluster_shards.py)."""

from __future__ import annotations

import time
from typing import Any

from django_jobs.inspector import get_inspector
from django_jobs.worker.child import WAIT
from testproject.probes.jobs import Sleep, Work
from tests.acceptance.conftest import Worker, done
from tests.conftest import RedisNamespace, wait_until

QUEUES = {"critical": {}, "default": {"shards": 4}, "low": {}}


def test_runworker__idle_children_wake_for_any_shard_and_drain_them_all(
    worker: Worker, redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "QUEUES": QUEUES}
    worker.start("--concurrency", "2", QUEUES=QUEUES)
    wait_until(lambda: get_inspector().workers(), timeout=20, why=worker.output)

    # Tasks enqueued one by one go to the shards in turn, and an idle child wakes for each at
    # once, whichever shard it is on (not at the end of its wait, WAIT seconds)
    handles = []
    for n in range(8):
        sent = time.monotonic()
        handles.append(Sleep.enqueue(Work(f"t{n}")))
        wait_until(lambda: len(done(redis_ns)) == len(handles), timeout=30, why=worker.output)
        assert time.monotonic() - sent < WAIT / 2, n
    handles += [Sleep.enqueue(Work(f"t{n}")) for n in range(8, 20)]
    wait_until(lambda: len(done(redis_ns)) == 20, timeout=30, why=worker.output)

    infos = {q.name: q for q in get_inspector().queues()}
    assert (infos["default"].completed, infos["default"].pending) == (20, 0)
    assert {h.queue for h in handles} == {"default"}
    (registered,) = get_inspector().workers()
    assert registered.queues == ("flows_critical", "critical", "default", "low", "flows")

    # A critical task enqueued behind a backlog on every shard runs next: after at most the
    # tasks the two children hold as it comes
    for n in range(40):
        Sleep.enqueue(Work(f"b{n}", seconds=0.05))
    before = len(done(redis_ns))
    Sleep.enqueue(Work("urgent"), queue="critical")
    wait_until(lambda: len(done(redis_ns)) == 61, timeout=60, why=worker.output)
    order = [entry.split(":")[0] for entry in done(redis_ns)]
    assert order.index("urgent") <= before + 2, (before, order)
    assert order.index("urgent") < 60, "the backlog was drained first"
