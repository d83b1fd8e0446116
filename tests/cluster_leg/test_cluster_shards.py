"""A hot queue sharded over a 3-master Redis Cluster (issue 20; django_jobs/broker/shards.py):
its shards' slots spread over the masters, and a real worker draining it makes each master
carry about a third of the work, as `INFO commandstats` counts it per node (the script calls:
EVALSHA, and EVAL/FCALL should any be made). docs/scale.rst quotes the split.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from redis.crc import key_slot

from django_jobs.broker.shards import shard_names
from django_jobs.inspector import get_inspector
from testproject.probes.jobs import Noop, Number
from tests.acceptance.conftest import Worker
from tests.cluster import ClusterSetup
from tests.conftest import wait_until

SHARDS = 8
QUEUES = {"critical": {}, "default": {"shards": SHARDS}, "low": {}}
TASKS = 1200
#: The script calls of a node (what a task costs a master: its enqueue, its fetch and ack).
SCRIPTS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")


@pytest.fixture
def sharded(on_cluster: str, settings: Any) -> str:
    settings.JOBS = {**settings.JOBS, "QUEUES": QUEUES}
    return on_cluster


def script_calls(cluster: ClusterSetup) -> dict[int, int]:
    """Each master's script calls so far, by port."""
    calls = {}
    for node in cluster.masters():
        with node.client() as client:
            stats = client.info("commandstats")
        calls[node.port] = sum(int(stats[name]["calls"]) for name in SCRIPTS if name in stats)
    return calls


def test_shards__eight_shards_spread_over_the_three_masters(
    cluster: ClusterSetup, sharded: str
) -> None:
    owners = Counter(cluster.owner(key_slot(n.encode())).port for n in shard_names("default", 8))
    assert sorted(owners.values()) == [2, 3, 3]


def test_shards__each_master_carries_about_a_third_of_a_hot_queue(
    cluster: ClusterSetup, sharded: str, cluster_worker: Worker, capsys: pytest.CaptureFixture[str]
) -> None:
    before = script_calls(cluster)
    for start in range(0, TASKS, 100):  # enqueue calls of 100 (one shard each) and of one
        Noop.enqueue_many([Number(n) for n in range(start, start + 50)])
        for n in range(start + 50, start + 100):
            Noop.enqueue(Number(n))
    cluster_worker.start("--concurrency", "2", REDIS_URL=cluster.url, QUEUES=QUEUES, LEASE=30)

    def drained() -> bool:
        default = next(q for q in get_inspector().queues() if q.name == "default")
        return default.completed == TASKS

    wait_until(drained, timeout=120, interval=0.2, why=cluster_worker.output)
    after = script_calls(cluster)

    delta = {port: after[port] - before[port] for port in after}
    total = sum(delta.values())
    shares = {port: round(100 * calls / total, 1) for port, calls in delta.items()}
    with capsys.disabled():
        print(f"\nscript calls per master for {TASKS} tasks on 8 shards: {delta} = {shares} %")
    assert total >= 2 * TASKS  # an enqueue and an ack-and-fetch per task at least
    assert all(20 <= share <= 47 for share in shares.values()), shares
