"""Scenario 12: flows under kill -9 and a Redis restart with AOF.

Two workers replay N three-step flows (each step a short pause) on a private redis-server with
`--appendonly yes`. Whole workers are killed (kill -9 of supervisor and children) and started
again, and Redis is restarted once in the middle. Every flow must succeed (0 lost runs), and no
step whose result was recorded may run again (each step checks, as it starts, whether its
result is already in the call's status hash: testproject/shop/flows.py, probe "rerun").

A step cut short by a kill runs again: that run was never recorded, which is at-least-once.
"""

from __future__ import annotations

import time

from tests.chaos.harness import Run
from tests.chaos.processes import ChaosError, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result

CONCURRENCY = 4
#: Short replay leases, as FAST has short task leases; a crash budget no kill pattern reaches.
FLOWS = {"FLOW_REPLAY_LEASE": 3, "FLOW_REPLAY_RENEW": 1, "MAX_CRASHES": 50}
PAUSE = 0.05


def run(run: Run, profile: Profile, result: Result) -> None:
    from django_jobs.flows import get_run
    from testproject.shop.flows import Steps, StepsFlow

    result.recovery_means = "kill -9 or Redis restart -> every flow still succeeds"
    server = run.server("flows-aof", appendonly=True)
    try:
        with run.stage("flows", server.url, **FLOWS) as stage:
            workers = stage.start_workers(2, CONCURRENCY)
            calls = [StepsFlow.start(Steps(n=3, pause=PAUSE)) for _ in range(profile.flows)]
            result.jobs = len(calls)
            spacing = profile.flows * 3 * PAUSE / (2 * CONCURRENCY) / (profile.flow_kills + 2)
            for i in range(profile.flow_kills):
                time.sleep(spacing)  # spacing the faults out over the drain
                victim = workers[i % len(workers)]
                victim.wait_ready()
                at = time.time()
                stage.fault("kill -9 worker", at, at, victim.kill9(), cap=victim.concurrency)
                workers[i % len(workers)] = stage.replace(victim)
                if i == profile.flow_kills // 2:
                    at = time.time()
                    server.restart()
                    stage.fault("Redis restart (appendonly)", at, time.time())
                    result.faults += 1
                result.faults += 1

            def status(call: str) -> str:
                found = get_run(call)
                return found.status if found else "gone"

            def settled() -> bool:
                return all(status(c) in ("succeeded", "failed", "canceled") for c in calls)

            try:
                wait_until(settled, 120, "every flow run ended")
            except ChaosError:
                pass  # counted below, with what became of each
            statuses = [status(c) for c in calls]
            rerun = stage.client.lrange(f"{stage.namespace}:probe:rerun", 0, -1)
            result.lost = sum(1 for s in statuses if s != "succeeded")
            result.duplicated = len(rerun)
            result.expect(result.lost == 0, f"{result.lost} flow runs did not succeed: "
                          f"{sorted(set(statuses))}")  # fmt: skip
            result.expect(not rerun, f"recorded steps ran again: {rerun[:5]!r}")
            result.note(
                f"{len(calls)} flows of 3 steps, {profile.flow_kills} whole workers killed, "
                f"Redis restarted once (appendonly)"
            )
    finally:
        server.stop()
