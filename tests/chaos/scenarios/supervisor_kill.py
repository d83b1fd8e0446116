"""Scenario 9: kill -9 of a busy worker's supervisor alone, again and again.

An OOM killer, or a container runtime signalling PID 1 only, kills the supervisor and nothing
else. Its children must die with it: within a second of the kill no process of that worker may
remain (found by pid, through /proc, whoever their parent is now), and none may start a task
after it (a "start" line from that worker's processes after the supervisor was dead). A child
left behind would run tasks with no lease renewed, invisible to the admin.

The tasks the dead worker held come back when their lease expires (LEASE 3 s, recoverer every
1 s); the worker is started again, as a process manager would, and at the end nothing is lost.
"""

from __future__ import annotations

import statistics
import time
from functools import partial

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run, Stage, Worker
from tests.chaos.processes import ChaosError, parent, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result, seconds
from tests.chaos.scenarios.common import Feeder, conclude, orphan_recoveries, spread

WORKERS = 2
CONCURRENCY = 3
#: Jobs per second, and seconds of work each: the workers are busy about half of the time.
RATE = 12.0
WORK = (0.1, 0.4)
#: No process of the worker may remain this many seconds after its supervisor's kill -9.
DIE_WITHIN = 1.0
#: How long a process left behind is watched (does it start tasks?) before the battery kills
#: it itself, and the pause between two kills (the restarted worker serving meanwhile).
WATCH = 1.0
SPACING = 1.0


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "kill -9 of a supervisor -> the task its child ran starts again"
    with run.stage("supervisor-kill") as stage:
        workers = stage.start_workers(WORKERS, CONCURRENCY)
        rng = stage.rng
        killed: list[tuple[str, float]] = []
        gone_after: list[float] = []

        def work(n: int) -> ChaosWork:
            return ChaosWork(n, seconds=round(rng.uniform(*WORK), 3))

        with Feeder(stage, RATE, work, batch=2):
            for index in range(profile.supervisor_kills):
                slot = index % len(workers)
                victim = workers[slot].wait_ready()
                wait_until(partial(busy, stage, victim), 10, f"worker {victim.name} busy")
                pids, at, dead = victim.kill9_supervisor()
                gone = gone_within(victim, at, result, pids)
                stage.fault("kill -9 supervisor", at, gone, pids, cap=victim.concurrency)
                killed.append((victim.name, dead))
                gone_after.append(gone - at)
                workers[slot] = stage.replace(victim).wait_ready()
                time.sleep(SPACING)  # spacing the faults; the feeder keeps the workers busy
        conclude(stage, result, drain=60)
        for name, dead in killed:
            late = [
                e
                for runs in stage.log.starts.values()
                for e in runs
                if e.worker == name and e.time > dead
            ]
            if late:
                result.problems.append(
                    f"{len(late)} task(s) started by worker {name}'s processes after its "
                    f"supervisor was dead, the first {min(e.time for e in late) - dead:.2f}s "
                    f"after"
                )
        recoveries = orphan_recoveries(stage.log, stage.faults)
        result.recovery = [t for times in recoveries.values() for t in times]
        result.note(
            f"{len(killed)} supervisors killed (kill -9 of the supervisor alone, its worker "
            f"busy); every process of the worker gone after "
            f"p50 {seconds(statistics.median(gone_after))}, max {seconds(max(gone_after))} "
            f"(allowed {DIE_WITHIN:g}s)"
        )
        for kind, times in sorted(recoveries.items()):
            result.note(f"{kind}: {len(times)} tasks caught mid-run, back in {spread(times)}")
        alive = [w.name for w in workers if w.alive and w.registered()]
        result.expect(len(alive) == len(workers), f"only {alive} of the workers still serve")


def busy(stage: Stage, worker: Worker) -> bool:
    """Whether one of the worker's children is running a task now (from the log)."""
    stage.log.read()
    now = time.time()
    return any(stage.log.running_at(pid, now) for pid in worker.children())


def gone_within(worker: Worker, at: float, result: Result, pids: set[int]) -> float:
    """Wait up to DIE_WITHIN for every process of the worker to be gone; return when they were.

    Any left behind is a problem: they are watched for WATCH seconds (the log tells whether they
    start tasks), then killed by the battery so that the scenario can go on.
    """
    try:
        wait_until(lambda: not worker.processes(), at + DIE_WITHIN - time.time(), "", 0.01)
    except ChaosError:
        pass
    left = worker.processes()
    if not left:
        return time.time()
    parents = sorted({parent(pid) for pid in left})
    result.problems.append(
        f"{len(left)} process(es) of worker {worker.name} still alive {DIE_WITHIN:g}s after "
        f"kill -9 of its supervisor (pids {sorted(left)}, of the {len(pids)} it had; parent "
        f"now {parents})"
    )
    time.sleep(WATCH)  # watching the orphans, not waiting for a condition
    worker.kill_leftovers()
    return time.time()
