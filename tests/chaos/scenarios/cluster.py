"""Scenario 20c (issue 20): a Redis Cluster master killed under load. Two workers on
`redis+cluster://` (3 masters, a replica each: tests/cluster.py) drain a steady feed spread over
the three queues, which live on different masters; the master holding the most of them is
killed (kill -9), the Cluster promotes its replica (cluster-node-timeout 2 s), the killed one
is started again (it rejoins as the new master's replica), and the same workers must carry on.
JOBS["REPLICA_ACKS"] = 1: every enqueue that returned was on the killed master's replica too,
so nothing accepted may be lost. An acknowledgement the replica had not received makes its task
run again: duplicates are traced to the kill, up to the jobs finished in the second before it
and the slots busy then.
"""

from __future__ import annotations

import time
from collections import Counter

import redis

from django_jobs.keys import QueueKeys
from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, QUEUES, Run
from tests.chaos.processes import wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, primary_lost, probe
from tests.cluster import ClusterSetup, slot_of

WORKERS = 2
CONCURRENCY = 2
RATE = 60.0
#: Seconds before the kill whose finished jobs may run again (their acks lost).
WINDOW = 1.0
#: The workers' lease: longer than the Cluster's failover takes (about 3 s).
LEASE = 8
AFTERMATH = LEASE + FAST["RECOVERER_INTERVAL"] + 3


def master_kill(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "kill -9 of a master -> a job enqueued then has run"
    setup = ClusterSetup(run.tmp / "cluster", replicas=1)
    setup.start()
    try:
        # The battery's own reads go through the first master's view of the Cluster (its
        # RedisCluster client follows the failover); the jobs through redis+cluster://.
        extra = {"REDIS_URL": setup.url, "REPLICA_ACKS": 1, "LEASE": LEASE}
        plain = f"redis://127.0.0.1:{setup.nodes[0].port}/0"
        with run.stage("cluster-master-kill", plain, **extra) as stage:
            stage.client = redis.RedisCluster(
                host="127.0.0.1", port=setup.nodes[0].port, decode_responses=True
            )
            stage.start_workers(WORKERS, CONCURRENCY)
            pids = sorted(w.pid for w in stage.workers)
            owner = {
                q: setup.owner(slot_of(QueueKeys(stage.namespace, q).pending)).port for q in QUEUES
            }
            port, served = Counter(owner.values()).most_common(1)[0]
            victim = next(n for n in setup.nodes if n.port == port)

            def work(n: int) -> ChaosWork:
                return ChaosWork(n, seconds=round(stage.rng.uniform(0.02, 0.08), 3))

            feeders = [Feeder(stage, RATE / len(QUEUES), work, queue=queue) for queue in QUEUES]
            for feeder in feeders:
                feeder.__enter__()
            try:
                time.sleep(3)  # load before the kill
                killed = time.time()
                victim.stop()  # kill -9
                # Its replica, promoted, has no replica of its own: with REPLICA_ACKS = 1 its
                # queues take no enqueue until one joins. The killed master, restarted (by its
                # process manager, say), rejoins as the replica of its former replica.
                queue = next(q for q in QUEUES if owner[q] == port)
                slot = slot_of(QueueKeys(stage.namespace, queue).pending)
                wait_until(lambda: setup.owner(slot) is not victim, 30, "the replica promoted")
                promoted = time.time()
                victim.start()
                result.recovery.append(probe(stage, killed, timeout=60))
                time.sleep(2)  # load after the recovery
            finally:
                for feeder in feeders:
                    feeder.__exit__()
            primary_lost(
                stage, "kill -9 of a master", killed, WINDOW, AFTERMATH, WORKERS * CONCURRENCY
            )
            conclude(stage, result, drain=120)
            raised = sum(f.failures for f in feeders)
            result.note(
                f"REPLICA_ACKS=1: killed the master of {served} of the {len(QUEUES)} queues; its "
                f"replica promoted {promoted - killed:.1f}s after; {raised} enqueues raised "
                f"(BrokerUnavailable, ReplicaAckTimeout)"
            )
            alive = sorted(w.pid for w in stage.workers if w.alive)
            result.expect(alive == pids, "a worker had to be restarted")
    finally:
        setup.stop()
