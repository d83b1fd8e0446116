"""Scenario 6: poison tasks, and the latency of everyone else's work meanwhile.

One poison kills its own process on every run: each death is a crash, not a failure, and past
MAX_CRASHES the task is dead ("crashed its worker"). The other raises on every run: it dies
after max_attempts. They sit on the first-priority queue; a steady trickle of normal jobs on the
last queue measures how long those wait to start, before and while the poison runs.
"""

from __future__ import annotations

import statistics
import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run, Stage
from tests.chaos.processes import wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, spread

CONCURRENCY = 2
MAX_CRASHES = 3
MAX_ATTEMPTS = 3
#: Normal jobs per second on the low queue, and how long the baseline is measured.
RATE = 5.0
BASELINE = 3.0
#: How much the poison may add to the normal jobs' median and worst wait.
SLOWER_P50 = 0.25
WORST = 2.0


def latencies(stage: Stage, ids: set[str]) -> list[float]:
    """Seconds from enqueue to start, for jobs that started."""
    stage.log.read()
    accepted = stage.ledger.accepted
    return [
        min(e.time for e in stage.log.started(i)) - accepted[i].sent
        for i in ids
        if stage.log.started(i)
    ]


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "a normal job's wait (enqueue -> start) on another queue meanwhile"
    with run.stage("poison", MAX_CRASHES=MAX_CRASHES) as stage:
        stage.start_workers(1, CONCURRENCY)
        normal = Feeder(stage, RATE, lambda n: ChaosWork(n), batch=1, queue="low")
        with normal:
            time.sleep(BASELINE)  # the baseline's length
            baseline = set(stage.ledger.accepted)
            crashers = stage.enqueue(
                profile.poison, lambda n: ChaosWork(n, fail="crash"), queue="critical"
            )
            raisers = stage.enqueue(
                profile.poison,
                lambda n: ChaosWork(n, fail="raise"),
                queue="critical",
                max_attempts=MAX_ATTEMPTS,
            )
            poison = set(crashers) | set(raisers)
            stage.ledger.expect_dead |= poison
            poisoned_at = set(stage.ledger.accepted)

            def all_dead() -> bool:
                return all(s == ["dead"] for s in stage.records(poison, "state").values())

            wait_until(all_dead, 60, "every poison task dead", interval=0.2)
        during = set(stage.ledger.accepted) - poisoned_at - poison
        conclude(stage, result, drain=30)
        result.faults = len(poison)

        records = stage.records(poison, "state", "error", "attempts", "crashes")
        for job in crashers:
            state, error, _attempts, crashes = records[job]
            starts = len(stage.log.started(job))
            result.expect(
                "crashed its worker" in (error or "")
                and crashes == str(MAX_CRASHES)
                and starts == MAX_CRASHES,
                f"crashing poison {job}: {state} after {starts} runs, {crashes} crashes: {error}",
            )
        for job in raisers:
            state, error, attempts, crashes = records[job]
            starts = len(stage.log.started(job))
            result.expect(
                (error or "").startswith("RuntimeError: poison")
                and attempts == str(MAX_ATTEMPTS)
                and starts == MAX_ATTEMPTS,
                f"raising poison {job}: {state} after {starts} runs, {attempts} attempts: {error}",
            )
        before = latencies(stage, baseline)
        result.recovery = latencies(stage, during)
        result.note(
            f"{len(crashers)} crashing and {len(raisers)} raising poison tasks on 'critical', "
            f"all dead (crash budget {MAX_CRASHES}, max_attempts {MAX_ATTEMPTS})"
        )
        result.note(
            f"normal jobs on 'low' waited {spread(before)} before the poison, "
            f"{spread(result.recovery)} during it"
        )
        if before and result.recovery:
            result.expect(
                statistics.median(result.recovery) <= statistics.median(before) + SLOWER_P50
                and max(result.recovery) <= WORST,
                "the poison slowed the other queue's work down",
            )
