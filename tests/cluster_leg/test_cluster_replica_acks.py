"""JOBS["REPLICA_ACKS"] on a Redis Cluster of its own, 3 masters with a replica each (issue 20,
the Cluster leg): each master an enqueue writes to gets a WAIT of its own, in the same round
trip; a master whose replica does not answer makes the enqueue raise ReplicaAckTimeout, and only
for its own queues."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs import Job, ReplicaAckTimeout
from django_jobs.client import get_broker
from tests.cluster import ClusterSetup, cluster_setup, slot_of  # noqa: F401 (the fixture)
from tests.conftest import wait_until
from tests.sentinel import Process

QUEUES = ["critical", "default", "low"]


@dataclass(frozen=True)
class Note:
    text: str


class KeepOnCluster(Job[Note]):
    def run(self, payload: Note) -> None:
        pass


def replica_of(setup: ClusterSetup, master: Process) -> Process:
    return next(
        node
        for node in setup.nodes
        if node.replication().get("role") == "slave"
        and int(str(node.replication()["master_port"])) == master.port
    )


def on_replica(setup: ClusterSetup, key: str) -> bytes | None:
    replica = replica_of(setup, setup.owner(slot_of(key)))
    with replica.client() as client:
        client.execute_command("READONLY")
        state: bytes | None = client.hget(key, "state")
        return state


@pytest.mark.parametrize("cluster_setup", [1], indirect=True)
def test_enqueue__on_a_cluster_every_master_written_waits_for_its_replica(
    cluster_setup: ClusterSetup,  # noqa: F811
    settings: Any,
) -> None:
    # Given a 3-master Cluster with a replica each, REPLICA_ACKS = 1, queues on several masters
    settings.JOBS = {"REDIS_URL": cluster_setup.url, "REPLICA_ACKS": 1, "QUEUES": QUEUES}
    broker = get_broker()
    owners = {q: cluster_setup.owner(slot_of(broker.keys(q).pending)) for q in QUEUES}
    assert len({o.port for o in owners.values()}) > 1, "the queues share one master"

    # When tasks are enqueued to each queue, alone and in a batch
    handles = [KeepOnCluster.enqueue(Note(q), queue=q) for q in QUEUES]
    handles += KeepOnCluster.enqueue_many([Note("a"), Note("b")], queue="low")

    # Then each is on its master's replica as the enqueue returns
    states = [on_replica(cluster_setup, broker.keys(h.queue).task(h.id)) for h in handles]
    assert states == [b"pending"] * len(handles)

    # And a master whose replica stopped answering refuses to confirm its queue's enqueues,
    # while a queue of another master is not held up
    settings.JOBS = {**settings.JOBS, "REPLICA_ACKS_TIMEOUT": 0.3}
    frozen = replica_of(cluster_setup, owners["low"])
    other = next(q for q in QUEUES if owners[q].port != owners["low"].port)
    frozen.freeze()
    try:
        with pytest.raises(ReplicaAckTimeout, match="only 0 of the 1 replicas"):
            KeepOnCluster.enqueue(Note("unconfirmed"), queue="low")
        assert KeepOnCluster.enqueue(Note("fine"), queue=other).state == "pending"
    finally:
        frozen.thaw()


def errorstat(node: Process, error: str) -> int:
    with node.client() as client:
        return int(client.info("errorstats").get(f"errorstat_{error}", {}).get("count", 0))


@pytest.mark.parametrize("cluster_setup", [1], indirect=True)
def test_enqueue__met_by_ask_waits_for_the_replica_of_the_master_that_took_it(
    cluster_setup: ClusterSetup,  # noqa: F811
    settings: Any,
) -> None:
    # Given REPLICA_ACKS = 1 and the slot of `default` being moved to another master, its keys
    # (none yet) all gone from the source, which then answers ASK
    settings.JOBS = {"REDIS_URL": cluster_setup.url, "REPLICA_ACKS": 1,
                     "REPLICA_ACKS_TIMEOUT": 0.5}  # fmt: skip
    broker = get_broker()
    slot = slot_of(broker.keys("default").pending)
    for master in cluster_setup.masters():  # every master has the scripts (no NOSCRIPT below)
        with master.client() as client:
            for script in broker.scripts.values():
                client.script_load(script.script)
    source = cluster_setup.owner(slot)
    masters = cluster_setup.masters()
    target = next(node for node in masters if node is not source)
    cluster_setup.open_move(slot, source, target)
    asks, retries = errorstat(source, "ASK"), errorstat(target, "TRYAGAIN")
    frozen = replica_of(cluster_setup, target)
    outcome: list[BaseException | str] = []

    def enqueue() -> None:
        try:
            outcome.append(KeepOnCluster.enqueue(Note("moving"), queue="default").id)
        except BaseException as exc:  # the test reads it
            outcome.append(exc)

    # When an enqueue meets the ASK (and the target's TRYAGAIN: a script naming a key it does
    # not hold yet), the target's replica stops answering, and the move ends
    thread = threading.Thread(target=enqueue)
    thread.start()
    frozen.freeze()
    try:
        wait_until(lambda: errorstat(source, "ASK") > asks, timeout=5)
        wait_until(lambda: errorstat(target, "TRYAGAIN") > retries, timeout=5)
        cluster_setup.close_move(slot, target, [source, *masters])
        thread.join(timeout=10)

        # Then the enqueue ran on the target and waited for the target's replica: it is not
        # confirmed by the source's, which answered at once (the write was not its)
        (result,) = outcome
        assert isinstance(result, ReplicaAckTimeout), result
        assert "only 0 of the 1 replicas" in str(result)
    finally:
        frozen.thaw()
    with target.client() as client:
        assert client.execute_command("CLUSTER COUNTKEYSINSLOT", slot) > 0
    with source.client() as client:
        assert client.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
