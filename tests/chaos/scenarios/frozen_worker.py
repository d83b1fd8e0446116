"""Scenario 4: a worker frozen past its lease while another recovers and completes its task.

SIGSTOP goes to the worker's whole process group (supervisor and children), as when a VM is
paused or a container frozen. The other worker's recoverer hands the task on once the lease has
expired, and runs it to completion. Then SIGCONT: the frozen child either finishes its run first
and reports, under an epoch that has moved on, so that it changes nothing, or its worker learns
from its next heartbeat that the lease is lost and interrupts the run (nothing is written). The
log may show the task done twice; that duplicate is the injected fault.
"""

from __future__ import annotations

import signal
import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, STALE_RUN, Run, Stage, Worker
from tests.chaos.processes import wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude

CONCURRENCY = 2
#: Seconds of work of the task caught by the freeze.
WORK = 2.0
#: How long the other worker may take to hand the task on: lease, sweep, and some slack.
HAND_ON = FAST["LEASE"] + FAST["RECOVERER_INTERVAL"] + 10


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "freeze -> the frozen worker's task starts on the other worker"
    with run.stage("frozen-worker") as stage:
        workers = stage.start_workers(2, CONCURRENCY)
        endings: list[str] = []
        for _ in range(profile.freezes):
            freeze_once(stage, workers, result, endings)
        conclude(stage, result, drain=30)
        result.note(
            f"{profile.freezes} freeze(s) of a whole worker for longer than its lease "
            f"({FAST['LEASE']}s); the thawed run finished {endings.count('done')} time(s) (its "
            f"late outcome refused, stale epoch) and was interrupted {endings.count('abort')} "
            f"time(s) (lease lost); the completed task stayed as it was"
        )


def freeze_once(stage: Stage, workers: list[Worker], result: Result, endings: list[str]) -> None:
    (job,) = stage.enqueue(1, lambda n: ChaosWork(n, seconds=WORK))
    key = stage.key("default", f"t:{job}")
    first = wait_until(lambda: stage.log.read().started(job), 30, "the task starting")
    pid = first[0].pid
    victim = next(w for w in workers if pid in w.children())
    pids = victim.pids()

    # Given the worker running it frozen, supervisor and children
    at = time.time()
    victim.signal_group(signal.SIGSTOP)
    try:
        # When the other worker takes the task over and completes it
        def elsewhere() -> list[float]:
            return [e.time for e in stage.log.read().started(job) if e.pid != pid]

        again = wait_until(elsewhere, HAND_ON, "the task starting on the other worker")
        result.recovery.append(again[0] - at)
        wait_until(
            lambda: stage.client.hget(key, "state") == "completed",
            30,
            "the task completed by the other worker",
        )
        before = stage.client.hgetall(key)
    finally:
        victim.signal_group(signal.SIGCONT)
    end = time.time()
    stage.fault(
        "SIGSTOP worker",
        at,
        end + WORK + 5,
        pids,
        cap=victim.concurrency,
        lifted=end,
        overlap=STALE_RUN,
    )

    # Then the thawed child's run ends: it finishes (its late outcome refused as stale), or its
    # worker, learning that the lease is lost, interrupts it (nothing written). Either way the
    # task completed elsewhere stays as it was.
    def ended() -> str:
        stage.log.read()
        lines = stage.log.by_pid[pid]
        for line in lines[lines.index(first[0]) + 1 :]:
            if line.job_id == job and line.event in ("done", "abort"):
                return line.event
        return ""

    how = wait_until(ended, WORK + 15, "the frozen child's run ending")
    said = f"{job}: outcome not written" if how == "done" else f"task {job}: run interrupted"
    wait_until(lambda: said in victim.output(), 15, f"the frozen worker saying {said!r}")
    endings.append(how)
    after = stage.client.hgetall(key)
    result.expect(after == before, f"the late outcome changed the task: {before} {after}")
    result.expect(victim.alive, f"the frozen worker died:\n{victim.tail()}")
