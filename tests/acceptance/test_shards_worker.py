"""A real `runworker` on a sharded queue, on one Redis (issue 20; broker/shards.py): idle
children woken by a task on any shard (one BLPOP over every shard's wake key), every shard
drained, a critical task still first, the worker registry showing the queue, not its shards;
a job type's concurrency_limit held across two workers (its tasks on one shard).
The Cluster leg runs one on 3 masters (tests/cluster_leg/test_cluster_shards.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_jobs.inspector import get_inspector
from django_jobs.worker.child import WAIT
from testproject.probes.jobs import Capped, Sleep, Work
from tests.acceptance.conftest import Worker, done, probe
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


@pytest.fixture
def other(redis_ns: RedisNamespace, tmp_path: Path) -> Iterator[Worker]:
    """A second runworker on the same namespace."""
    process = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "other.log")
    yield process
    process.kill()


def test_runworker__a_concurrency_limit_holds_across_two_workers_on_8_shards(
    worker: Worker, other: Worker, redis_ns: RedisNamespace, settings: Any
) -> None:
    # Given 8 tasks of a job type capped at 2 at once enqueued one by one on default in 8
    # shards (a job type without limits would be spread over all 8), and 16 without limits
    eight = {**QUEUES, "default": {"shards": 8}}
    settings.JOBS = {**settings.JOBS, "QUEUES": eight}
    for n in range(8):
        Capped.enqueue(Work(f"c{n}", seconds=0.3))
    for n in range(16):
        Sleep.enqueue(Work(f"s{n}"))

    # When two workers with 4 slots each drain it
    worker.start("--concurrency", "4", QUEUES=eight)
    other.start("--concurrency", "4", QUEUES=eight)

    # Then every capped task ran at its first attempt, never more than 2 at once (red before:
    # each shard counted its own 2), and the others all ran beside them
    finished = probe(redis_ns, "capped_done")
    wait_until(lambda: redis_ns.client.llen(finished) == 8, timeout=30, why=worker.output)
    assert redis_ns.client.get(probe(redis_ns, "capped_most")) == b"2"
    runs = sorted(item.decode() for item in redis_ns.client.lrange(finished, 0, -1))
    assert runs == sorted(f"c{n}:1:0" for n in range(8))
    wait_until(lambda: len(done(redis_ns)) == 16, timeout=30, why=other.output)
