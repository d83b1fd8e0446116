"""Scenario 3d/3e: Redis killed (kill -9) and started again with AOF, `appendfsync always` or
`everysec`, under a steady feed and a backlog: count what survives.

With `always`, every write Redis answered is on disk before the answer: nothing accepted may be
lost. With `everysec`, up to about a second of writes before the kill may be gone (Redis'
documented cost): jobs accepted in the last FSYNC_WINDOW before it are a known cost, counted
apart (`+N known`), and anything older lost is a failure. A lost ack makes a task run again (a
duplicate blamed on the kill); the same worker processes must carry on.
"""

from __future__ import annotations

import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, Run
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, probe

WORKERS = 2
CONCURRENCY = 2
ENQUEUE_TIMEOUT = 2.0
RATE = 40.0
BACKLOG = 100
#: With everysec, writes older than this before the kill must have survived.
FSYNC_WINDOW = 2.0
AFTERMATH = FAST["LEASE"] + FAST["RECOVERER_INTERVAL"] + 3


def always(run: Run, profile: Profile, result: Result) -> None:
    _crashes(run, profile, result, "always")


def everysec(run: Run, profile: Profile, result: Result) -> None:
    _crashes(run, profile, result, "everysec")


def _crashes(run: Run, profile: Profile, result: Result, fsync: str) -> None:
    result.recovery_means = "Redis up again -> a job enqueued then has run"
    server = run.server(f"aof-{fsync}", appendonly=True, extra=("--appendfsync", fsync))
    try:
        with run.stage(f"aof-{fsync}", server.url, ENQUEUE_TIMEOUT=ENQUEUE_TIMEOUT) as stage:
            workers = stage.start_workers(WORKERS, CONCURRENCY)
            pids = sorted(w.pid for w in workers)
            window: set[str] = set()

            def work(n: int) -> ChaosWork:
                return ChaosWork(n, seconds=round(stage.rng.uniform(0.02, 0.1), 3))

            with Feeder(stage, RATE, work):
                for _ in range(profile.restarts):
                    time.sleep(2)  # spacing the faults
                    stage.enqueue(BACKLOG, lambda n: ChaosWork(n, seconds=0.05))
                    at = time.time()
                    server.crash()
                    server.start()
                    end = time.time()
                    if fsync != "always":
                        recent = stage.ledger.accepted.copy().items()
                        window |= {i for i, a in recent if at - FSYNC_WINDOW <= a.at <= end}
                        stage.ledger.may_lose |= window
                    stage.fault("kill -9 Redis", at - 1, end + AFTERMATH, cap=BACKLOG)
                    result.recovery.append(probe(stage, end))
            conclude(stage, result, drain=120)
            gone = window - stage.log.done_ids()
            result.known_lost = len(gone)
            earlier = f"of the {len(window)} jobs accepted in the {FSYNC_WINDOW:g}s before a kill"
            result.note(
                f"appendfsync {fsync}: {profile.restarts} kill -9 of Redis; "
                + (f"{earlier}, {len(gone)} were gone" if window else "nothing may be lost")
            )
            alive = sorted(w.pid for w in stage.workers if w.alive)
            result.expect(alive == pids, "a worker had to be restarted")
    finally:
        server.stop()
