"""Scenario 2: SIGTERM during load, again and again; each stopped worker is started again.

A graceful stop lets running tasks finish within SHUTDOWN_TIMEOUT, then puts the rest back
without spending an attempt or counting a crash: no duplicate and no loss, ever. A few jobs
outlast the shutdown timeout, so that stops also exercise the put-back.
"""

from __future__ import annotations

import signal
import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude

CONCURRENCY = 4
SHUTDOWN_TIMEOUT = 1.5
#: Seconds of work of a long job (past the shutdown timeout), and the share of long jobs.
LONG = 4.0
LONG_SHARE = 0.06
SHORT = (0.05, 0.15)


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "SIGTERM -> the worker has exited (tasks finished or put back)"
    with run.stage("sigterm", SHUTDOWN_TIMEOUT=SHUTDOWN_TIMEOUT) as stage:
        workers = stage.start_workers(2, CONCURRENCY)
        rng = stage.rng

        def work(n: int) -> ChaosWork:
            seconds = LONG if rng.random() < LONG_SHARE else rng.uniform(*SHORT)
            return ChaosWork(n, seconds=round(seconds, 3))

        stage.enqueue(profile.term_jobs, work)
        mean = LONG_SHARE * LONG + (1 - LONG_SHARE) * sum(SHORT) / 2
        spacing = 0.6 * profile.term_jobs * mean / (2 * CONCURRENCY) / profile.terms
        for index in range(profile.terms):
            time.sleep(spacing)  # spacing the stops out over the drain
            slot = index % len(workers)
            victim = workers[slot].wait_ready()
            pids = victim.pids()
            at = time.time()
            victim.signal_group(signal.SIGTERM)  # the children ignore it: the supervisor decides
            code = victim.exit_code(timeout=SHUTDOWN_TIMEOUT + 30)
            result.recovery.append(time.time() - at)
            result.expect(code == 0, f"worker {victim.name} exited {code} on SIGTERM")
            # A run still going at the shutdown deadline is killed then (and its task put back)
            stage.fault("SIGTERM", at, at + SHUTDOWN_TIMEOUT, pids, cap=0)
            workers[slot] = stage.replace(victim)
        conclude(stage, result, drain=3 * profile.term_jobs * mean / (2 * CONCURRENCY) + 60)

        put_back = sum(w.output().count("put back (worker stopping)") for w in stage.workers)
        crashed = {
            i: r
            for i, r in stage.records(stage.ledger.accepted, "crashes", "attempts").items()
            if [value or "0" for value in r] != ["0", "0"]  # a counter absent: none counted
        }
        result.note(f"{profile.terms} SIGTERMs; {put_back} running tasks put back unspent")
        result.expect(put_back > 0, "no stop had to put a running task back")
        result.expect(not crashed, f"a graceful stop spent attempts or counted crashes: {crashed}")
