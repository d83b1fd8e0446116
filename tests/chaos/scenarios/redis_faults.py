"""Scenario 3: Redis faults, on a redis-server the battery started itself (never the shared one).

- 3a: connections dropped (CLIENT KILL TYPE normal), and Redis frozen (SIGSTOP) past the
  enqueue deadline, then resumed: an enqueue during the freeze must raise BrokerUnavailable
  within ENQUEUE_TIMEOUT; nothing accepted may be lost.
- 3b: Redis restarted without persistence: whatever it held is gone, the known cost of that
  configuration, which the battery reports rather than fails on.
- 3c: Redis restarted with `--appendonly yes`: nothing accepted may be lost.

Throughout, the same worker processes must carry on: they reconnect, nobody restarts them.
Jobs arrive at a steady rate from a feeder thread while the faults land.
"""

from __future__ import annotations

import threading
import time

from django_jobs.exceptions import BrokerUnavailable
from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, STALE_RUN, Run, Stage
from tests.chaos.processes import RedisServer, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, probe, spread

CONCURRENCY = 2
WORKERS = 2
ENQUEUE_TIMEOUT = 2.0
#: Slack allowed on the enqueue deadline (process scheduling on a busy machine).
DEADLINE_SLACK = 0.5
#: How long Redis stays frozen: past the enqueue deadline and past the lease.
FREEZE = ENQUEUE_TIMEOUT + 2
RATE = 40.0
#: Enqueues sent at once into the frozen Redis, and jobs waiting when Redis restarts.
ENQUEUERS = 4
BACKLOG = 100
#: After a fault, a task caught in it may still finish and fail to ack until its lease runs
#: out and the recoverer hands it on: the window in which a duplicate is blamed on the fault.
AFTERMATH = FAST["LEASE"] + FAST["RECOVERER_INTERVAL"] + 3


def _feeder(stage: Stage) -> Feeder:
    def work(n: int) -> ChaosWork:
        return ChaosWork(n, seconds=round(stage.rng.uniform(0.02, 0.1), 3))

    return Feeder(stage, RATE, work)


def enqueue_frozen(stage: Stage, result: Result) -> list[float]:
    """Enqueue from several threads at once (as a threaded web server would, each on a
    connection of its own) into a frozen Redis; return how long each took to raise."""
    elapsed: list[float] = []

    def one() -> None:
        started = time.monotonic()
        try:
            stage.enqueue(1)
            result.problems.append("an enqueue succeeded while Redis was frozen")
        except BrokerUnavailable:
            elapsed.append(time.monotonic() - started)

    threads = [threading.Thread(target=one) for _ in range(ENQUEUERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    result.expect(len(elapsed) == ENQUEUERS, "an enqueue during the freeze neither ran nor raised")
    return elapsed


def _settle(stage: Stage, result: Result, workers: list[int], timeout: float = 120) -> None:
    """Drain, check, and make sure the very same supervisors served throughout."""
    conclude(stage, result, drain=timeout)
    alive = [w for w in stage.workers if w.alive]
    result.expect(
        sorted(w.pid for w in alive) == sorted(workers),
        "a worker had to be restarted: "
        + "\n".join(w.tail() for w in stage.workers if not w.alive),
    )
    crashed = sum(w.output().count("crashed") for w in stage.workers)
    stranded = sum(w.output().count("its worker died (lease expired)") for w in stage.workers)
    result.note(
        f"{crashed} child(ren) exited on a Redis error and were replaced; {stranded} task(s) "
        f"came back only when their lease expired"
    )
    uncertain = stage.ledger.uncertain
    if uncertain:
        ran = {runs[0].n for runs in stage.log.dones.values()} & uncertain
        result.note(
            f"{len(uncertain)} enqueue(s) raised BrokerUnavailable; {len(ran)} of them were "
            f"applied anyway and ran (as documented: an error may still mean enqueued)"
        )


def connections_and_freeze(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "fault over -> a job enqueued then has run"
    server = run.server("faults")
    try:
        _connections_and_freeze(run, profile, result, server)
    finally:
        server.stop()


def _connections_and_freeze(
    run: Run, profile: Profile, result: Result, server: RedisServer
) -> None:
    with run.stage("redis-faults", server.url, ENQUEUE_TIMEOUT=ENQUEUE_TIMEOUT) as stage:
        workers = stage.start_workers(WORKERS, CONCURRENCY)
        pids = [w.pid for w in workers]
        slots = WORKERS * CONCURRENCY
        freezes = []
        with _feeder(stage):
            for _ in range(profile.redis_rounds):
                for _ in range(3):
                    time.sleep(1)  # spacing the faults
                    at = time.time()
                    killed = stage.client.client_kill_filter(_type="normal", skipme=True)
                    stage.fault("CLIENT KILL", at - 1, at + AFTERMATH, cap=slots)
                    result.expect(killed, "CLIENT KILL found no connection to kill")
                    result.recovery.append(probe(stage, at))
                time.sleep(1)
                at = time.time()
                server.freeze()
                try:
                    freezes += enqueue_frozen(stage, result)
                    time.sleep(max(0.0, at + FREEZE - time.time()))  # the freeze's length
                finally:
                    server.thaw()
                end = time.time()
                stage.fault(
                    "SIGSTOP Redis",
                    at - 1,
                    end + AFTERMATH,
                    cap=slots,
                    lifted=end,
                    overlap=STALE_RUN,
                )
                result.recovery.append(probe(stage, end))
        _settle(stage, result, pids)
    worst = max(freezes, default=0.0)
    result.note(
        f"{len(freezes)} enqueues ({ENQUEUERS} threads at once) into a {FREEZE:g}s freeze raised "
        f"BrokerUnavailable after {spread(freezes)} (ENQUEUE_TIMEOUT {ENQUEUE_TIMEOUT:g}s)"
    )
    result.expect(
        worst <= ENQUEUE_TIMEOUT + DEADLINE_SLACK,
        f"enqueue took {worst:.2f}s to give up, past its deadline of {ENQUEUE_TIMEOUT:g}s",
    )


def _restarts(run: Run, profile: Profile, result: Result, server: RedisServer) -> None:
    persistent = server.appendonly
    result.recovery_means = "restart over -> a job enqueued then has run"
    name = "redis-restart-aof" if persistent else "redis-restart"
    with run.stage(name, server.url, ENQUEUE_TIMEOUT=ENQUEUE_TIMEOUT) as stage:
        workers = stage.start_workers(WORKERS, CONCURRENCY)
        pids = [w.pid for w in workers]
        before: set[str] = set()
        with _feeder(stage):
            for _ in range(profile.restarts):
                time.sleep(2)  # spacing the faults
                # A backlog, so that the restart finds work waiting in Redis
                stage.enqueue(BACKLOG, lambda n: ChaosWork(n, seconds=0.05))
                at = time.time()
                server.restart()
                end = time.time()
                if not persistent:
                    before |= {i for i, a in stage.ledger.accepted.copy().items() if a.at <= end}
                    stage.ledger.may_lose |= before
                stage.fault("restart Redis", at - 1, end + AFTERMATH, cap=WORKERS * CONCURRENCY)
                result.recovery.append(probe(stage, end))
                if not persistent:
                    # Workers register again with their next beat: nothing else is there.
                    wait_until(
                        lambda: all(w.registered() for w in workers), 30, "workers registered"
                    )
        _settle(stage, result, pids)
        if not persistent:
            lost = before - stage.log.done_ids()
            result.note(
                f"known cost: {profile.restarts} restart(s) without persistence lost "
                f"{len(lost)} of the {len(before)} jobs accepted before them"
            )
            result.known_lost = len(lost)


def restart_without_persistence(run: Run, profile: Profile, result: Result) -> None:
    server = run.server("restart")
    try:
        _restarts(run, profile, result, server)
    finally:
        server.stop()


def restart_with_aof(run: Run, profile: Profile, result: Result) -> None:
    server = run.server("restart-aof", appendonly=True)
    try:
        _restarts(run, profile, result, server)
    finally:
        server.stop()
