"""Scenarios 20a/20b (issue 20): a Sentinel failover under load. Two workers drain a steady feed
on `redis+sentinel://`; the primary is killed (kill -9) and its link to the replica with it (the
replica follows LAG behind, tests/sentinel.py), the sentinel promotes the replica, and the
workers must follow it without being restarted.

- 20a, JOBS["REPLICA_ACKS"] = 1: every enqueue that returned was on the replica, so nothing
  accepted may be lost.
- 20b, REPLICA_ACKS = 0: what the replica had not received is gone; jobs accepted in the WINDOW
  before the kill are the known cost (`+N known`), anything older lost is a failure.

Outcomes are not waited for in either: an ack the replica did not receive makes its task run
again (a duplicate blamed on the kill, up to the jobs finished in the window and the slots
busy at the kill). A second replica, chained to the first, lets the promoted one confirm
enqueues at once.
"""

from __future__ import annotations

import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, Run, admin_client
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, primary_lost, probe
from tests.sentinel import SentinelSetup, redis_server

WORKERS = 2
CONCURRENCY = 2
RATE = 60.0
#: Seconds the replica lags behind the primary.
LAG = 0.05
#: Seconds before the kill whose accepted jobs 20b may lose (the lag, and then some).
WINDOW = 1.0
#: The workers' lease: longer than the failover takes (about 3 s), or they would stop.
LEASE = 6
AFTERMATH = LEASE + FAST["RECOVERER_INTERVAL"] + 3


def with_replica_acks(run: Run, profile: Profile, result: Result) -> None:
    _failover(run, profile, result, acks=1)


def without_replica_acks(run: Run, profile: Profile, result: Result) -> None:
    _failover(run, profile, result, acks=0)


def _failover(run: Run, profile: Profile, result: Result, acks: int) -> None:
    result.recovery_means = "kill -9 of the primary -> a job enqueued then has run"
    setup = SentinelSetup(redis_server(), run.tmp / f"sentinel-{acks}", lag=LAG, chained=True)
    setup.start()
    try:
        plain = f"redis://127.0.0.1:{setup.primary.port}/0"  # the battery's own reads, for now
        extra = {"REDIS_URL": setup.url, "REPLICA_ACKS": acks, "LEASE": LEASE}
        with run.stage(f"sentinel-acks-{acks}", plain, **extra) as stage:
            stage.start_workers(WORKERS, CONCURRENCY)
            pids = sorted(w.pid for w in stage.workers)

            def work(n: int) -> ChaosWork:
                return ChaosWork(n, seconds=round(stage.rng.uniform(0.02, 0.08), 3))

            with Feeder(stage, RATE, work) as feeder:
                time.sleep(3)  # load before the kill
                killed, promoted = setup.crash()
                stage.client = admin_client(f"redis://127.0.0.1:{setup.replica.port}/0")
                result.recovery.append(probe(stage, killed))
                time.sleep(2)  # load after the recovery
            accepted = stage.ledger.accepted.copy().items()
            window = {i for i, a in accepted if killed - WINDOW <= a.at <= killed}
            if not acks:
                stage.ledger.may_lose |= window
            primary_lost(
                stage, "kill -9 of the primary", killed, WINDOW, AFTERMATH, WORKERS * CONCURRENCY
            )
            conclude(stage, result, drain=120)
            gone = window - stage.log.done_ids()
            if not acks:
                result.known_lost = len(gone)
            result.note(
                f"REPLICA_ACKS={acks}, replica {LAG * 1000:g} ms behind: promoted "
                f"{promoted - killed:.1f}s after the kill; {feeder.failures} enqueues raised "
                f"(BrokerUnavailable, ReplicaAckTimeout); gone: {len(gone)} of the "
                f"{len(window)} jobs accepted in the {WINDOW:g}s before it"
            )
            alive = sorted(w.pid for w in stage.workers if w.alive)
            result.expect(alive == pids, "a worker had to be restarted")
    finally:
        setup.stop()
