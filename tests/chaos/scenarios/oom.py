"""Scenario 11: the OOM window. Redis at maxmemory with noeviction, for a few seconds.

On a redis-server the battery started, `CONFIG SET maxmemory` to just above the memory in use,
with `maxmemory-policy noeviction` (the policy the start-up banner recommends), while jobs keep
arriving and a worker runs them; once Redis refuses writes, hold it there for WINDOW seconds,
then lift the limit. Meanwhile:

- an enqueue is refused with a named error (BrokerUnavailable, saying why), never a raw redis
  error, and what it refused was never accepted, so it is not counted as lost;
- no script half-applies: nothing accepted is lost or stranded in active, none runs twice at
  once;
- the worker backs off: no child dies (a Redis refusal is not a crash, and not a task's fault),
  and no task is counted as having crashed its worker.
"""

from __future__ import annotations

import time
from functools import partial

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, STALE_RUN, Run
from tests.chaos.processes import RedisServer, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude, probe, spread

CONCURRENCY = 2
ENQUEUE_TIMEOUT = 2.0
#: Jobs per second (in batches of one) and their work.
RATE = 40.0
WORK = (0.01, 0.05)
#: Seconds of jobs before each window, and how long Redis refuses writes in it.
WARM_UP = 1.0
WINDOW = 3.0
#: maxmemory is set this many bytes above used_memory: the next few enqueues cross it.
HEADROOM = 32 * 1024
#: After a window, how long a duplicate "done" is blamed on it (a task whose ack was refused,
#: then whose lease ran out, runs again).
AFTERMATH = FAST["LEASE"] + FAST["RECOVERER_INTERVAL"] + 3


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "limit lifted -> a job enqueued then has run"
    server = run.server("oom")
    try:
        _oom(run, profile, result, server)
    finally:
        server.stop()


def _oom(run: Run, profile: Profile, result: Result, server: RedisServer) -> None:
    with run.stage("oom", server.url, ENQUEUE_TIMEOUT=ENQUEUE_TIMEOUT) as stage:
        (worker,) = stage.start_workers(1, CONCURRENCY)
        rng = stage.rng
        stage.client.config_set("maxmemory-policy", "noeviction")
        reached: list[float] = []

        def work(n: int) -> ChaosWork:
            return ChaosWork(n, seconds=round(rng.uniform(*WORK), 3))

        with Feeder(stage, RATE, work, batch=1, keep_going=True) as feeder:
            for _ in range(profile.oom_windows):
                time.sleep(WARM_UP)  # jobs flowing before the window
                refused = feeder.failures + len(feeder.unnamed)
                at = time.time()
                used = int(stage.client.info("memory")["used_memory"])
                stage.client.config_set("maxmemory", used + HEADROOM)
                wait_until(
                    partial(refused_since, feeder, refused),
                    15,
                    "an enqueue refused once maxmemory was reached",
                )
                reached.append(time.time() - at)
                time.sleep(WINDOW)  # the window's length: Redis refusing writes
                stage.client.config_set("maxmemory", 0)
                lifted = time.time()
                stage.fault(
                    "maxmemory, noeviction",
                    at - 1,
                    lifted + AFTERMATH,
                    cap=CONCURRENCY,
                    lifted=lifted,
                    overlap=STALE_RUN,
                )
                result.recovery.append(probe(stage, lifted))
        conclude(stage, result, drain=60)
        unnamed = sorted({f"{type(e).__module__}.{type(e).__name__}: {e}" for e in feeder.unnamed})
        result.expect(
            not unnamed,
            f"{len(feeder.unnamed)} enqueue(s) raised an error that is not django_jobs' own: "
            f"{unnamed[:3]}",
        )
        result.expect(feeder.failures, "no enqueue was refused with BrokerUnavailable")
        deaths = [
            line
            for line in worker.output().splitlines()
            if "crashed" in line or ") while running it" in line
        ]
        result.expect(not deaths, f"{len(deaths)} worker child death(s): {deaths[:3]}")
        crashes = {i: r[0] for i, r in stage.records(stage.ledger.accepted, "crashes").items()}
        counted = {i: c for i, c in crashes.items() if c not in ("0", None)}
        result.expect(not counted, f"{len(counted)} task(s) counted a crash: {list(counted)[:3]}")
        result.expect(worker.alive, f"the worker exited:\n{worker.tail()}")
        result.note(
            f"{profile.oom_windows} window(s) of {WINDOW:g}s at maxmemory (noeviction), reached "
            f"{spread(reached)} after the limit was set; {feeder.failures} enqueue(s) refused "
            f"with BrokerUnavailable, e.g. {feeder.refusals[:1]}; {len(deaths)} child deaths"
        )


def refused_since(feeder: Feeder, before: int) -> bool:
    """Whether enqueues were refused (named or not) since `before` of them were."""
    return feeder.failures + len(feeder.unnamed) > before
