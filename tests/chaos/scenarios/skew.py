"""Scenario 16: clock skew between worker machines (faked: see tests/chaos/skew/).

Worker w0 runs with its clock SKEW seconds ahead, w1 SKEW seconds behind (time.time() in all
their processes; libfaketime is not installed here). Leases, retries and recoveries are dated by
Redis' clock in the scripts, so nothing may depend on the skew: w0 is killed (kill -9, whole)
under load; its tasks must come back after about one lease (not LEASE plus or minus the skew:
a lease dated by the workers' clocks would expire at once on w0's or never on w1's), nothing
lost, no two runs at once beyond what the kill explains.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from testproject.probes.jobs import ChaosWork
from tests.chaos.checker import Log
from tests.chaos.harness import FAST, ROOT, Run
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude, orphan_recoveries, spread

CONCURRENCY = 2
SKEW = 120.0
JOBS = 200
#: The test-only sitecustomize that skews the clock.
SITE = str(ROOT / "tests" / "chaos" / "skew")
#: A task the kill caught must start again within a lease and two sweeps (plus slack).
BOUND = FAST["LEASE"] + 2 * FAST["RECOVERER_INTERVAL"] + 2


class SkewedLog(Log):
    """The Chaos log, each line's time taken back to the real clock by its worker's skew."""

    def __init__(self, directory: Path, skews: dict[str, float]) -> None:
        super().__init__(directory)
        self.skews = skews

    def _add(self, line: str) -> None:
        event, job_id, n, attempt, pid, at, *worker = line.split()
        real = float(at) - self.skews.get(worker[0] if worker else "-", 0.0)
        super()._add(" ".join([event, job_id, n, attempt, pid, f"{real:.6f}", *worker]))


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "kill -9 of the worker ahead -> its task runs again on the one behind"
    skews = {"w0": SKEW, "w1": -SKEW}
    with run.stage("skew") as stage:
        stage.log = SkewedLog(stage.log_dir, skews)
        for name, skew in skews.items():
            worker = stage.worker(name, CONCURRENCY)
            path = os.pathsep.join(filter(None, [SITE, os.environ.get("PYTHONPATH")]))
            worker.env = {"CHAOS_CLOCK_SKEW": str(skew), "PYTHONPATH": path}
            worker.start()
        for worker in stage.workers:
            worker.wait_ready()
        w0 = stage.workers[0]
        stage.enqueue(JOBS, lambda n: ChaosWork(n, seconds=0.2))
        time.sleep(2)  # the load going on both workers before the kill
        at = time.time()
        pids = w0.kill9()
        stage.fault("kill -9 (clock ahead)", at - 0.05, time.time(), pids, cap=CONCURRENCY)
        conclude(stage, result, drain=120)
        times = [t for ts in orphan_recoveries(stage.log, stage.faults).values() for t in ts]
        result.recovery += times
        result.note(
            f"w0 {SKEW:+g}s, w1 {-SKEW:+g}s; w0 killed under {JOBS} jobs: its "
            f"{len(times)} caught task(s) ran again after {spread(times)} (LEASE "
            f"{FAST['LEASE']}s)"
        )
        result.expect(times, "the kill caught no task: nothing was tested")
        result.expect(
            all(t <= BOUND for t in times),
            f"a caught task came back after {max(times, default=0):.1f}s, past {BOUND:g}s: "
            f"the lease depends on a worker's clock",
        )
