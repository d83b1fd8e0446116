"""Scenario 4: a worker frozen past its lease while another recovers and completes its task.

SIGSTOP goes to the worker's whole process group (supervisor and children), as when a VM is
paused or a container frozen. The other worker's recoverer hands the task on once the lease has
expired, and runs it to completion. Then SIGCONT: the frozen child finishes its run and reports,
but its outcome is written under an epoch that has moved on, so it changes nothing. The log
shows the task done twice; that duplicate is the injected fault.
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
        for _ in range(profile.freezes):
            freeze_once(stage, workers, result)
        conclude(stage, result, drain=30)
        result.note(
            f"{profile.freezes} freeze(s) of a whole worker for longer than its lease "
            f"({FAST['LEASE']}s); each late outcome was refused (stale epoch) and left the "
            f"completed task as it was"
        )


def freeze_once(stage: Stage, workers: list[Worker], result: Result) -> None:
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

    # Then the thawed child finishes its run, and its late outcome changes nothing
    wait_until(
        lambda: any(e.pid == pid for e in stage.log.read().finished(job)),
        WORK + 15,
        "the frozen child finishing its run",
    )
    wait_until(
        lambda: f"{job}: outcome not written" in victim.output(),
        15,
        "the frozen worker's outcome refused as stale",
    )
    after = stage.client.hgetall(key)
    result.expect(after == before, f"the late outcome changed the task: {before} {after}")
    result.expect(victim.alive, f"the frozen worker died:\n{victim.tail()}")
