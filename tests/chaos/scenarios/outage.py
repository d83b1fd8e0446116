"""Scenario 10: the long outage. Redis paused for longer than LEASE under running tasks.

Redis is frozen (SIGSTOP of a redis-server the battery started) for LEASE + 2 s while long
tasks run and jobs keep arriving. When it comes back every lease has run out, and a recoverer
elsewhere (the battery's, as for a worker on another host) is first in line: it sent its sweep
the moment Redis froze, on a connection it had open, so Redis runs it before the heartbeats
that queued up behind it (a heartbeat already on its way when Redis froze is ahead of it, and
its worker keeps its task). Left to the workers alone, the heartbeat waiting on Redis nearly
always renews first, and no lease is lost.
So the tasks go back to pending while their runs still go on, and the worker that ran each
learns at its next heartbeat that it is no longer its own. It must then interrupt that run (a
lost lease, raised like a timeout) and write no outcome, and it must never run one task in two
of its own slots at once. The checker's rule: no concurrent double run on one worker, ever; on
two workers, no longer than STALE_RUN after Redis is back. Nothing accepted may be lost.
"""

from __future__ import annotations

import threading
import time
from functools import partial

import redis

from django_jobs.broker.redis import RedisBroker
from django_jobs.conf import get_settings
from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, STALE_RUN, Run, Stage
from tests.chaos.processes import ChaosError, RedisServer, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude

WORKERS = 2
CONCURRENCY = 2
ENQUEUE_TIMEOUT = 2.0
#: How long Redis stays frozen: past the lease, so that every running task loses it.
PAUSE = FAST["LEASE"] + 2
#: Seconds of work of the tasks the pause catches: they outlast it by more than STALE_RUN, so
#: that a stale run left going would overlap the run that took its task over.
LONG = PAUSE + STALE_RUN + 2
#: Short jobs per second arriving meanwhile, and their work.
RATE = 10.0
SHORT = (0.02, 0.1)
#: After the pause, how long a duplicate "done" is blamed on it: a stale run may end then.
AFTERMATH = LONG + FAST["LEASE"] + FAST["RECOVERER_INTERVAL"]


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "Redis back -> a task the pause caught runs again (or goes on)"
    server = run.server("outage")
    try:
        _outage(run, profile, result, server)
    finally:
        server.stop()


def _outage(run: Run, profile: Profile, result: Result, server: RedisServer) -> None:
    with run.stage("outage", server.url, ENQUEUE_TIMEOUT=ENQUEUE_TIMEOUT) as stage:
        workers = stage.start_workers(WORKERS, CONCURRENCY)
        pids = sorted(w.pid for w in workers)
        rng = stage.rng
        caught: list[str] = []
        recovered: list[tuple[str, str]] = []

        def work(n: int) -> ChaosWork:
            return ChaosWork(n, seconds=round(rng.uniform(*SHORT), 3))

        with Feeder(stage, RATE, work, batch=1) as feeder:
            for _ in range(profile.outages):
                long = stage.enqueue(WORKERS, lambda n: ChaosWork(n, seconds=LONG))
                wait_until(partial(started, stage, long), 15, "the long tasks started")
                caught += long
                sweep = Rival(stage)
                at = time.time()
                server.freeze()
                try:
                    sweep.start()
                    time.sleep(PAUSE)  # the outage's length
                finally:
                    server.thaw()
                end = time.time()
                recovered += sweep.result()
                stage.fault(
                    "SIGSTOP Redis past the lease",
                    at - 1,
                    end + AFTERMATH,
                    cap=WORKERS * CONCURRENCY,
                    lifted=end,
                    overlap=STALE_RUN,
                )
                result.recovery += again(stage, long, end)
                # Every caught task completed before the next pause (which would catch it again,
                # and a third catch is the crash budget), jobs arriving meanwhile
                wait_until(
                    partial(completed, stage, long),
                    2 * LONG + 30,
                    "the caught tasks completed",
                    0.2,
                )
        conclude(stage, result, drain=LONG * 2 + 60)
        # A heartbeat already on its way when Redis froze is ahead of the rival and renews its
        # worker's leases: that task is simply kept. None taken at all would prove nothing.
        taken = set(caught) & {task_id for task_id, _state in recovered}
        lost_lease = sum(w.output().count("lost its lease") for w in stage.workers)
        runs = {i: len(stage.log.started(i)) for i in caught}
        result.note(
            f"{profile.outages} pause(s) of {PAUSE:g}s (LEASE {FAST['LEASE']}s) under "
            f"{len(caught)} tasks of {LONG:g}s: the rival recovered {len(recovered)} task(s) "
            f"({len(taken)} of the caught) the moment Redis was back; the caught tasks started "
            f"{sorted(runs.values())} "
            f"times; the workers logged {lost_lease} lost lease(s); {feeder.failures} "
            f"enqueue(s) raised BrokerUnavailable meanwhile"
        )
        result.expect(
            taken,
            f"the rival recovered none of the {len(caught)} tasks the pauses caught "
            f"({recovered}): no lease was lost, nothing was tested",
        )
        alive = sorted(w.pid for w in stage.workers if w.alive)
        result.expect(
            alive == pids,
            "a worker had to be restarted: "
            + "\n".join(w.tail() for w in stage.workers if not w.alive),
        )


def started(stage: Stage, ids: list[str]) -> bool:
    return all(stage.log.read().started(i) for i in ids)


def completed(stage: Stage, ids: list[str]) -> bool:
    return all(r == ["completed"] for r in stage.records(ids, "state").values())


def again(stage: Stage, ids: list[str], end: float) -> list[float]:
    """For the tasks the pause caught: seconds from Redis' return until each started again, for
    those that did within a lease and two sweeps (the others went on where they were)."""

    def restarted() -> bool:
        stage.log.read()
        return all(stage.log.first_start_after(i, end) for i in ids)

    try:
        wait_until(restarted, FAST["LEASE"] + 2 * FAST["RECOVERER_INTERVAL"] + 2, "")
    except ChaosError:
        pass  # some were kept by their own worker: nothing to time for them
    starts = [stage.log.first_start_after(i, end) for i in ids]
    return [start - end for start in starts if start is not None]


class Rival:
    """A recoverer elsewhere, first in line when Redis comes back.

    Its connection is opened (and answered) before the freeze; `start` sends one sweep of the
    default queue on it from a thread, which Redis reads first once resumed: the socket that
    became readable first is served first. Its client waits out the pause.
    """

    def __init__(self, stage: Stage) -> None:
        client = redis.Redis.from_url(
            stage.redis_url, decode_responses=True, socket_timeout=PAUSE + 30
        )
        client.ping()
        self.broker = RedisBroker(client, get_settings())
        self.recovered: list[tuple[str, str]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._sweep, name="rival", daemon=True)

    def _sweep(self) -> None:
        try:
            self.recovered = [(i, str(state)) for i, state in self.broker.recover("default")]
        except BaseException as exc:
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def result(self) -> list[tuple[str, str]]:
        """What it recovered, once Redis has answered."""
        self.thread.join(timeout=30)
        self.broker.client.close()
        if self.error is not None:
            raise ChaosError(f"the rival recoverer failed: {self.error!r}") from self.error
        return self.recovered
