"""A real `runworker` on a 3-master Redis Cluster (issue 20): strict priority across queues on
different nodes, an idle worker woken by any of them at once (no polling), a stop at once.

The default queues (critical, default, low; and the flows' two) are on two masters: critical
and default share one, low is on another (the slot of each queue's hash tag), so a fetch and an
idle wait span nodes.
"""

from __future__ import annotations

import signal
import time

from redis.crc import key_slot

from django_jobs.client import get_broker
from testproject.probes.jobs import Sleep, Work
from tests.acceptance.conftest import Worker
from tests.cluster import ClusterSetup
from tests.conftest import wait_until


def done(cluster: ClusterSetup, namespace: str) -> list[str]:
    with cluster.client() as client:
        raw = client.lrange(f"{namespace}:probe:done", 0, -1)
    return [item.decode().split(":")[0] for item in raw]


def commands(cluster: ClusterSetup) -> int:
    """Commands every node has run so far (INFO commandstats)."""
    total = 0
    for node in cluster.nodes:
        with node.client() as client:
            total += sum(int(v["calls"]) for v in client.info("commandstats").values())
    return total


def test_cluster__the_default_queues_span_two_masters(cluster: ClusterSetup) -> None:
    owners = {q: cluster.owner(key_slot(q.encode())).port for q in ("critical", "default", "low")}
    assert owners["critical"] == owners["default"] != owners["low"]


def test_runworker__on_a_cluster_a_critical_task_runs_before_a_low_backlog_on_another_node(
    cluster: ClusterSetup, on_cluster: str, cluster_worker: Worker
) -> None:
    # Given a backlog on `low` (one master) that a worker drains one task at a time
    for n in range(30):
        Sleep.enqueue(Work(f"low{n}", seconds=0.05), queue="low")
    cluster_worker.start("--concurrency", "1", REDIS_URL=cluster.url, LEASE=30)
    wait_until(lambda: len(done(cluster, on_cluster)) >= 3, timeout=30, why=cluster_worker.output)

    # When a critical task (another master) is enqueued half-way
    before = len(done(cluster, on_cluster))
    Sleep.enqueue(Work("urgent"), queue="critical")

    # Then it runs next: after at most the low task running as it came
    wait_until(lambda: "urgent" in done(cluster, on_cluster), timeout=30)
    order = done(cluster, on_cluster)
    assert order.index("urgent") <= before + 1, order
    assert len(order) < 31, "the backlog was not drained first"
    wait_until(lambda: len(done(cluster, on_cluster)) == 31, timeout=30)
    assert sorted(done(cluster, on_cluster)) == sorted(["urgent", *(f"low{n}" for n in range(30))])


def test_runworker__on_a_cluster_an_idle_worker_wakes_for_any_queue_and_does_not_poll(
    cluster: ClusterSetup, on_cluster: str, cluster_worker: Worker
) -> None:
    # Given an idle worker whose children wait on three queues over two masters
    cluster_worker.start("--concurrency", "2", REDIS_URL=cluster.url, LEASE=30)
    wait_until(lambda: get_broker().workers(), timeout=20, why=cluster_worker.output)

    # When it has nothing to do for a few seconds, it sends a few commands a second (its
    # loops' ticks), not a busy poll...
    first, since = commands(cluster), time.monotonic()
    wait_until(lambda: time.monotonic() - since > 3, timeout=5, interval=0.5)
    per_second = (commands(cluster) - first) / (time.monotonic() - since)
    assert per_second < 150, per_second

    # ...and a task enqueued on any queue starts at once, whichever node it is on
    for queue in ("low", "critical", "default"):
        sent = time.monotonic()
        Sleep.enqueue(Work(f"wake-{queue}"), queue=queue)
        wait_until(lambda q=queue: f"wake-{q}" in done(cluster, on_cluster), timeout=5,
                   interval=0.005, why=cluster_worker.output)  # fmt: skip
        assert time.monotonic() - sent < 1.0, queue


def test_runworker__on_a_cluster_an_idle_worker_stops_at_once_on_sigterm(
    cluster: ClusterSetup, on_cluster: str, cluster_worker: Worker
) -> None:
    # Given an idle worker, its children blocked on each queue's wake key
    cluster_worker.start("--concurrency", "2", REDIS_URL=cluster.url)

    def blocked() -> int:
        total = 0
        for node in cluster.nodes:
            with node.client() as client:
                total += sum("b" in c["flags"] for c in client.client_list())
        return total

    (info,) = wait_until(lambda: get_broker().workers(), timeout=20, why=cluster_worker.output)
    assert len(info.queues) == 5  # the flows' two queues, then critical, default, low
    wait_until(lambda: blocked() == 2 * 5, timeout=20, why=cluster_worker.output)

    # When it is told to stop
    sent = time.monotonic()
    cluster_worker.signal(signal.SIGTERM)

    # Then it exits at once: each child unblocked its waits on every node. The waits had just
    # begun (the children had just started), so one left to time out would last about 5 s.
    assert cluster_worker.wait(timeout=20) == 0, cluster_worker.output()
    assert time.monotonic() - sent < 3.0, cluster_worker.output()
