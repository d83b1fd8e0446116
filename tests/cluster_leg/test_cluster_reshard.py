"""Moving a slot while workers drain it (issue 20): nothing lost, nothing run twice.

The slot of queue `default` moves to another master key batch by key batch, as
`redis-cli --cluster reshard` moves it (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE),
while two workers drain a backlog of it and more tasks are enqueued. Between two batches the
test waits until the nodes have refused a call of the workers on the half-moved slot (TRYAGAIN:
a script whose keys are split, or one naming the queue's guard key, see broker/cluster.py), so
the workers meet every state of the move. An enqueue meanwhile waits for the move's end (its
own TRYAGAIN), within JOBS["ENQUEUE_TIMEOUT"]; one that waits longer is refused, and the caller
knows it. Afterwards every task enqueued has run exactly once, and the queue's keys are all on
the new master.
"""

from __future__ import annotations

import threading
import time

from redis.crc import key_slot

from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from testproject.probes.jobs import Sleep, Work
from tests.acceptance.conftest import Worker
from tests.cluster import ClusterSetup
from tests.conftest import wait_until

BACKLOG, DURING = 120, 30


def tryagains(cluster: ClusterSetup) -> int:
    """TRYAGAIN replies every node has given so far (INFO errorstats)."""
    total = 0
    for node in cluster.nodes:
        with node.client() as client:
            total += int(client.info("errorstats").get("errorstat_TRYAGAIN", {}).get("count", 0))
    return total


def test_runworker__a_slot_moved_while_workers_drain_it_loses_nothing_and_runs_nothing_twice(
    cluster: ClusterSetup, on_cluster: str, cluster_worker: Worker
) -> None:
    # Given two workers draining a backlog of `default`
    tags = [f"t{n}" for n in range(BACKLOG)]
    for tag in tags:
        Sleep.enqueue(Work(tag, seconds=0.01))
    second = Worker(cluster_worker.url, on_cluster, cluster_worker.log.with_name("second.log"))
    for worker in (cluster_worker, second):
        worker.start("--concurrency", "2", REDIS_URL=cluster.url, LEASE=30)
    try:
        done_key = f"{on_cluster}:probe:done"
        client = cluster.client()
        wait_until(lambda: client.llen(done_key) >= 10, timeout=30, why=cluster_worker.output)

        # When its slot moves to another master, batch by batch, with tasks enqueued meanwhile
        slot = key_slot(get_broker().keys("default").pending.encode())
        source = cluster.owner(slot)
        target = next(node for node in cluster.masters() if node is not source)
        refused: list[str] = []

        def enqueue_more() -> None:
            for n in range(DURING):
                try:
                    Sleep.enqueue(Work(f"d{n}", seconds=0.01))
                    tags.append(f"d{n}")
                except BrokerUnavailable:  # BrokerRefused too: told, so not lost
                    refused.append(f"d{n}")

        enqueuing = threading.Thread(target=enqueue_more)

        def between() -> None:
            seen = tryagains(cluster)
            wait_until(lambda: tryagains(cluster) > seen, timeout=20, why=cluster_worker.output)
            if not enqueuing.is_alive() and not enqueuing.ident:
                enqueuing.start()

        since, errors = time.monotonic(), tryagains(cluster)
        moved = cluster.move_slot(slot, target, batch=10, between=between)
        took, errors = time.monotonic() - since, tryagains(cluster) - errors
        enqueuing.join(timeout=60)

        # Then every task runs, once, from the new master
        def ran() -> list[str]:
            return [item.decode().split(":")[0] for item in client.lrange(done_key, 0, -1)]

        wait_until(lambda: len(ran()) >= len(tags), timeout=60, interval=0.05,
                   why=cluster_worker.output)  # fmt: skip
        assert moved > 2 * BACKLOG // 3  # the records and the queue's structures
        assert cluster.owner(slot) is target
        runs = ran()
        print(
            f"\nreshard: {moved} keys moved in {took:.1f}s ({errors} TRYAGAIN answers); "
            f"{len(tags)} tasks enqueued, {len(refused)} refused during the move; ran "
            f"{len(set(runs))}, twice {len(runs) - len(set(runs))}, "
            f"lost {len(set(tags) - set(runs))}"
        )
        assert sorted(runs) == sorted(tags), "lost or run twice"
        assert len(tags) + len(refused) == BACKLOG + DURING
        with target.client() as node:
            assert node.execute_command("CLUSTER COUNTKEYSINSLOT", slot) > 0
        with source.client() as node:
            assert node.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
        for worker in (cluster_worker, second):
            assert worker.process is not None
            assert worker.process.poll() is None, worker.output()
    finally:
        second.kill()
