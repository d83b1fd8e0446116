"""Scenario 5: a handler holding the GIL in C for about twice the lease.

`sum(range(n))` never returns to the interpreter, so nothing in the child can run: no signal
handler, no thread. The supervisor, another process, renews the lease meanwhile, so the task
must not look dead: it is not recovered, not handed to the other (idle) worker, not counted as
a crash, and completes once.
"""

from __future__ import annotations

import time

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, Run, Stage
from tests.chaos.processes import ChaosError, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude

#: How long the handler should hold the GIL, in leases (at least two must pass), and how many
#: times it may try, each twice as long as the last.
LEASES = 3
ROUNDS = 3


def calibrate(seconds: float) -> int:
    """The n for which sum(range(n)) takes about `seconds` here (best of three)."""
    n = 10**7
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        sum(range(n))
        best = min(best, time.perf_counter() - started)
    return int(n * seconds / best)


def run(run: Run, profile: Profile, result: Result) -> None:
    lease = FAST["LEASE"]
    spin = calibrate(LEASES * lease)
    with run.stage("gil") as stage:
        stage.start_workers(2, 1)
        # The calibration ran here, maybe on a busy machine: if the hold came out too short to
        # prove anything, hold again for twice as long.
        for _ in range(ROUNDS):
            held, ahead = hold(stage, spin, result)
            result.faults += 1
            result.note(
                f"sum(range({spin:.2e})) held the GIL for {held:.1f}s (LEASE {lease}s): started "
                f"once, completed once, its lease {min(ahead, default=0):.1f}s or more ahead"
            )
            if held > 2 * lease:
                break
            spin *= 2
        conclude(stage, result, drain=30)
        result.expect(
            held > 2 * lease,
            f"the handler held the GIL only {held:.1f}s: too short to prove anything",
        )


def hold(stage: Stage, spin: int, result: Result) -> tuple[float, list[float]]:
    """Run one GIL-holding task to the end, checking it all along; return how long it held the
    GIL and how far ahead of Redis' clock its lease was at each look."""
    lease = FAST["LEASE"]
    (job,) = stage.enqueue(1, lambda n: ChaosWork(n, spin=spin), timeout=120)
    key = stage.key("default", f"t:{job}")
    lease_key = stage.key("default", "lease")
    started = wait_until(lambda: stage.log.read().started(job), 30, "the task starting")
    epoch = stage.client.hget(key, "epoch")
    ahead: list[float] = []

    # While it runs: one start only, the same epoch, and a lease always ahead of Redis' clock
    def finished() -> bool:
        stage.log.read()
        if len(stage.log.started(job)) > 1:
            raise ChaosError("the task was handed to another worker while it ran")
        pipe = stage.client.pipeline(transaction=False)
        pipe.hmget(key, ["state", "epoch"])
        pipe.zscore(lease_key, job)
        pipe.time()
        (state, now_epoch), score, (seconds, micros) = pipe.execute()
        if state == "active":
            if now_epoch != epoch:
                raise ChaosError(f"the epoch moved on while it ran: {epoch!r} -> {now_epoch!r}")
            if score is not None:
                ahead.append(score - (seconds + micros / 1e6))
        return job in stage.log.dones

    wait_until(finished, 20 * lease + 60, "the GIL-holding task finishing", interval=0.2)
    held = stage.log.finished(job)[0].time - started[0].time
    wait_until(lambda: stage.client.hget(key, "state") == "completed", 30, "the task completed")
    crashes = stage.client.hget(key, "crashes")
    # A counter nothing counted is absent from the record (None): no crash.
    result.expect(crashes in ("0", None), f"the run was counted as a crash ({crashes!r})")
    result.expect(ahead and min(ahead) > 0, f"the lease ran out while it ran: {ahead}")
    return held, ahead
