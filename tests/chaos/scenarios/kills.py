"""Scenario 1: kill -9 random children and whole workers while two workers drain the jobs.

A killed child's task goes back at once (the supervisor sees the death); a killed worker's tasks
come back when their lease expires (LEASE 3 s, recoverer every 1 s). A killed worker is started
again, as a process manager would. A duplicate is possible only when a kill lands between a
job's "done" line and its ack: at most one per child killed, one per slot of a worker killed.
"""

from __future__ import annotations

import os
import signal
import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude, orphan_recoveries, spread

CONCURRENCY = 4
#: Share of the kills that take a whole worker (supervisor and children) rather than one child.
WHOLE_WORKER = 0.3
#: Mean seconds of work per job: the drain lasts about jobs * MEAN_WORK / slots.
MEAN_WORK = 0.1


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "kill -9 -> the task it caught mid-run starts again"
    with run.stage("kills") as stage:
        workers = stage.start_workers(2, CONCURRENCY)
        rng = stage.rng
        stage.enqueue(
            profile.kill_jobs,
            lambda n: ChaosWork(n, seconds=round(rng.uniform(0.5, 1.5) * MEAN_WORK, 3)),
        )
        drain_estimate = profile.kill_jobs * MEAN_WORK / (2 * CONCURRENCY)
        spacing = 0.7 * drain_estimate / profile.kills
        whole = 0
        for _ in range(profile.kills):
            time.sleep(spacing)  # spacing the faults out over the drain
            for worker in workers:  # a restarted worker is up before the next kill
                worker.wait_ready()
            index = rng.randrange(len(workers))
            victim = workers[index]
            if rng.random() < WHOLE_WORKER:
                at = time.time()
                pids = victim.kill9()
                stage.fault("kill -9 worker", at, at, pids, cap=victim.concurrency)
                workers[index] = stage.replace(victim)
                whole += 1
            else:
                pid = rng.choice(victim.children())
                at = time.time()
                os.kill(pid, signal.SIGKILL)
                stage.fault("kill -9 child", at, at, {pid}, cap=1)
        done_at_last_kill = len(stage.log.read().done_ids())
        conclude(stage, result, drain=3 * drain_estimate + 60)
        recoveries = orphan_recoveries(stage.log, stage.faults)
        result.recovery = [t for times in recoveries.values() for t in times]
        result.note(
            f"{profile.kills - whole} children and {whole} whole workers killed; the last kill "
            f"landed with {profile.kill_jobs - done_at_last_kill} jobs still to do"
        )
        for kind, times in sorted(recoveries.items()):
            result.note(f"{kind}: {len(times)} tasks caught mid-run, back in {spread(times)}")
        result.expect(
            done_at_last_kill < profile.kill_jobs, "the jobs drained before the last kill"
        )
