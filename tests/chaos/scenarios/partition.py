"""Scenario 13: a network partition between one worker and Redis, and connections dropped.

Worker w0 reaches Redis through the battery's TCP proxy (tests/chaos/proxy.py); w1 directly.
While w0 runs tasks that take LEASE + 1 s, the proxy stalls (from the moment they run until w1
ran them again and they ended on w0, LEASE + 3 s at the least): w0 can neither
renew its leases nor write its outcomes, which wait in the proxy. w1's recoverer takes the
expired leases and w1 runs those tasks again. w0's runs end inside the partition, and their acks
reach Redis late, when it heals: every one must be refused (the epoch fences it), and the record
stays the one w1 wrote. Then the proxy drops every connection a few times under load (resets).
Nothing accepted may be lost; two runs at once only across the partition, within STALE_RUN.
"""

from __future__ import annotations

import time
from functools import partial

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, STALE_RUN, Run, Stage
from tests.chaos.processes import RedisServer, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.proxy import Proxy
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, probe

CONCURRENCY = 2
ENQUEUE_TIMEOUT = 2.0
#: The partition outlasts the lease; the caught tasks end inside it, their acks held.
PARTITION = FAST["LEASE"] + 3
#: Seconds the partition may last at the most, waiting for w1 to take the caught tasks.
PARTITION_MAX = 60
CAUGHT = FAST["LEASE"] + 1
RATE = 10.0
DROPS = 3
#: After the partition, how long a duplicate "done" is blamed on it.
AFTERMATH = FAST["LEASE"] + FAST["RECOVERER_INTERVAL"] + 3
#: What w0 logs for a task whose outcome it was refused (after "probes.Chaos <id>").
REFUSED = ": outcome not written, the task was handed to another worker"


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "partition healed -> a job enqueued then has run"
    server = run.server("partition")
    proxy = Proxy(server.port).start()
    try:
        _partition(run, profile, result, server, proxy)
    finally:
        proxy.stop()
        server.stop()


def _partition(
    run: Run, profile: Profile, result: Result, server: RedisServer, proxy: Proxy
) -> None:
    with run.stage("partition", server.url, ENQUEUE_TIMEOUT=ENQUEUE_TIMEOUT) as stage:
        w0 = stage.worker("w0", CONCURRENCY)
        w0.env = {"REDIS_URL": proxy.url}
        w0.start().wait_ready()
        caught: list[str] = []
        lengths: list[float] = []
        for _ in range(profile.partitions):
            long = stage.enqueue(CONCURRENCY, lambda n: ChaosWork(n, seconds=CAUGHT))
            wait_until(partial(started_by, stage, long, "w0"), 15, "w0 running the caught tasks")
            caught += long
            pids = w0.processes() | w0.pids()
            # The partition starts as soon as w0 runs them (w1, direct to Redis, starts inside
            # it: on a loaded machine its start-up took long enough for the caught tasks to end
            # before their leases did), and lasts until w1 ran them again and w0's runs ended
            # (their acks held), PARTITION at the least.
            at = time.time()
            proxy.stall()
            if len(stage.workers) == 1:
                stage.worker("w1", CONCURRENCY).start().wait_ready()

            wait_until(partial(caught_on_both, stage, long), PARTITION_MAX, "w1 running them again")
            wait_until(partial(past, at + PARTITION), PARTITION, "the partition's length")
            proxy.heal()
            end = time.time()
            lengths.append(end - at)
            pids |= w0.processes()
            stage.fault(
                "partition w0",
                at - 1,
                end + AFTERMATH,
                pids,
                cap=CONCURRENCY,
                lifted=end,
                overlap=STALE_RUN,
            )
            result.recovery.append(probe(stage, end))
        dropped = 0
        with Feeder(stage, RATE, lambda n: ChaosWork(n, seconds=0.05), batch=1):
            for _ in range(DROPS):
                time.sleep(1)  # spacing the drops
                at = time.time()
                dropped += proxy.drop()
                stage.fault("proxy drop", at - 1, at + AFTERMATH, cap=CONCURRENCY)
                result.recovery.append(probe(stage, at))
        conclude(stage, result, drain=60)
        zombies = [i for i in caught if any(e.worker == "w0" for e in stage.log.finished(i))]
        elsewhere = [i for i in caught if any(e.worker == "w1" for e in stage.log.started(i))]
        output = w0.output()
        refused = [i for i in zombies if f"{i}{REFUSED}" in output]
        result.note(
            f"{profile.partitions} partition(s) of {max(lengths, default=0):.1f}s at the most "
            f"(LEASE {FAST['LEASE']}s) "
            f"under {len(caught)} tasks of {CAUGHT:g}s on w0: {len(elsewhere)} ran again on w1, "
            f"{len(zombies)} finished on w0 inside the partition, the outcome of {len(refused)} "
            f"of them refused; {proxy.held} chunk(s) held; {DROPS} drops closed {dropped} socket(s)"
        )
        result.expect(
            len(elsewhere) == len(caught),
            f"only {len(elsewhere)} of the {len(caught)} caught tasks ran on w1: no lease lost",
        )
        result.expect(zombies, "no run on w0 finished inside the partition: no late ack to refuse")
        result.expect(
            len(refused) == len(zombies),
            f"{len(zombies)} zombie run(s) finished on w0, {len(refused)} outcome(s) refused",
        )
        result.expect(w0.alive, f"w0 exited:\n{w0.tail()}")


def started_by(stage: Stage, ids: list[str], worker: str) -> bool:
    stage.log.read()
    return all(any(e.worker == worker for e in stage.log.started(i)) for i in ids)


def finished_by(stage: Stage, ids: list[str], worker: str) -> bool:
    stage.log.read()
    return all(any(e.worker == worker for e in stage.log.finished(i)) for i in ids)


def caught_on_both(stage: Stage, ids: list[str]) -> bool:
    """w1 started each of ids again, and w0's runs of them ended (their acks held)."""
    return started_by(stage, ids, "w1") and finished_by(stage, ids, "w0")


def past(when: float) -> bool:
    return time.time() >= when
