"""Scenario 1: kill -9 random children and whole workers while two workers drain the jobs.

A killed child's task goes back at once (the supervisor sees the death); a killed worker's tasks
come back when their lease expires (LEASE 3 s, recoverer every 1 s). A killed worker is started
again, as a process manager would. A duplicate is possible only when a kill lands between a
job's "done" line and its ack: at most one per child killed, one per slot of a worker killed.

Then a storm: children running no-op jobs as fast as they can, killed every few milliseconds,
so that kills also land in the worker's own bookkeeping (the slot a child writes around each
task), not only in job code.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from django_jobs.broker.shards import shards_for
from django_jobs.conf import get_settings
from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run, Stage, Worker
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude, orphan_recoveries, spread

CONCURRENCY = 4
#: Share of the kills that take a whole worker (supervisor and children) rather than one child.
WHOLE_WORKER = 0.3
#: Mean seconds of work per job: the drain lasts about jobs * MEAN_WORK / slots.
MEAN_WORK = 0.1
MAX_CRASHES = 10
#: Seconds between two kills of the storm, and no-op jobs queued for it per kill.
STORM_SPACING = 0.05
STORM_JOBS = 40
#: Scenario 21: the shards of the jobs' queue.
SHARDS = 4
#: Jobs enqueued per call.
BATCH = 50


def run(run: Run, profile: Profile, result: Result) -> None:
    kills(run, profile, result, "kills")


def sharded(run: Run, profile: Profile, result: Result) -> None:
    """Scenario 21: scenario 1 with the jobs' queue split into SHARDS shards (each its own
    lists and lease set, a worker serving them all): the same counts must hold."""
    queues = {"critical": {}, "default": {"shards": SHARDS}, "low": {}}
    kills(run, profile, result, f"kills, {SHARDS} shards", QUEUES=queues)


def kills(run: Run, profile: Profile, result: Result, name: str, **jobs: Any) -> None:
    """Scenario 1 on a stage of `name` with `jobs` in its JOBS."""
    result.recovery_means = "kill -9 -> the task it caught mid-run starts again"
    # Innocent tasks hit by three of a hundred kills would die of the crash budget (scenario 6
    # tests the budget): a larger one keeps this scenario about losses and duplicates.
    with run.stage(name, MAX_CRASHES=MAX_CRASHES, **jobs) as stage:
        workers = stage.start_workers(2, CONCURRENCY)
        rng = stage.rng
        # A batch goes to one shard (the next of this process's turns): batches of BATCH spread
        # a sharded queue's tasks over its shards.
        for start in range(0, profile.kill_jobs, BATCH):
            stage.enqueue(
                min(BATCH, profile.kill_jobs - start),
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
        storm_kills = storm(stage, workers, profile)
        conclude(stage, result, drain=3 * drain_estimate + 120)
        if jobs:
            spread_over_shards(stage, result)
        recoveries = orphan_recoveries(stage.log, stage.faults)
        result.recovery = [t for times in recoveries.values() for t in times]
        result.note(
            f"{profile.kills - whole} children and {whole} whole workers killed; the last kill "
            f"landed with {profile.kill_jobs - done_at_last_kill} jobs still to do; then a "
            f"storm of {storm_kills} kills {STORM_SPACING * 1000:.0f}ms apart"
        )
        for kind, times in sorted(recoveries.items()):
            result.note(f"{kind}: {len(times)} tasks caught mid-run, back in {spread(times)}")
        result.expect(
            done_at_last_kill < profile.kill_jobs, "the jobs drained before the last kill"
        )
        # A supervisor that hung (or died) stops beating and replacing children
        alive = [w.name for w in workers if w.alive and w.registered()]
        result.expect(len(alive) == len(workers), f"only {alive} of the workers still serve")


def spread_over_shards(stage: Stage, result: Result) -> None:
    """Note in which shard each task of the sharded queue was, and expect every shard used."""
    shards = shards_for(get_settings()).of("default")
    ids = [i for i, accepted in stage.ledger.accepted.items() if accepted.queue == "default"]
    pipe = stage.client.pipeline(transaction=False)
    for task_id in ids:
        for shard in shards:
            pipe.exists(stage.key(shard, f"t:{task_id}"))
    found = pipe.execute()
    counts = [sum(found[i :: len(shards)]) for i in range(len(shards))]
    result.note(f"tasks of 'default' by shard ({', '.join(shards)}): {counts}")
    result.expect(all(counts), f"a shard of 'default' had no task: {counts}")


def storm(stage: Stage, workers: list[Worker], profile: Profile) -> int:
    """Kill children running no-op jobs (on the first queue, so they come first), one every
    STORM_SPACING; return how many were killed."""
    stage.enqueue(profile.storm_kills * STORM_JOBS, queue="critical")
    kills = 0
    for _ in range(profile.storm_kills):
        time.sleep(STORM_SPACING)  # spacing the faults
        children = [pid for w in workers for pid in w.children()]
        if not children:
            continue
        pid = stage.rng.choice(children)
        at = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # exited meanwhile
        stage.fault("kill -9 child (storm)", at, at, {pid}, cap=1)
        kills += 1
    return kills
