"""Flows on real workers (`manage.py runworker`): kills, restarts, freezes, load, fan-out.

Every step of the test flows checks, as it starts, whether its result is already recorded, and
says so in the probe "rerun" (testproject/shop/flows.py): that list must stay empty.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from django_jobs.flows import get_run, send_signal
from django_jobs.flows.events import publish, start_call
from testproject.shop.flows import (
    FanOut,
    FanOutFlow,
    Frozen,
    FrozenFlow,
    Nap,
    NapFlow,
    OverlapFlow,
    Steps,
    StepsFlow,
    Wait,
    WaitFlow,
)
from tests.acceptance.conftest import Worker
from tests.conftest import RedisNamespace, wait_until

#: Shorter leases than FAST's, task and replay alike: each kill costs a lease and a sweep.
FLOWS = {"LEASE": 2, "HEARTBEAT_INTERVAL": 0.5, "RECOVERER_INTERVAL": 0.5,
         "FLOW_REPLAY_LEASE": 2, "FLOW_REPLAY_RENEW": 0.5, "FLOW_UNKNOWN_DELAY": 0.2,
         "MAX_CRASHES": 50}  # fmt: skip


def probe(ns: RedisNamespace, name: str) -> list[str]:
    return [x.decode() for x in ns.client.lrange(f"{ns.namespace}:probe:{name}", 0, -1)]


def status(call: str) -> str:
    run = get_run(call)
    return run.status if run else "gone"


def finished(call: str, worker: Worker, timeout: float = 30) -> None:
    wait_until(lambda: status(call) in ("succeeded", "failed", "canceled"), timeout=timeout,
               why=worker.output)  # fmt: skip


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_kill9__a_three_step_flow_completes_and_no_recorded_step_runs_again(
    worker: Worker, redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    call = StepsFlow.start(Steps(n=3, pause=0.4))
    kills = 0
    while status(call) != "succeeded" and kills < 4:
        worker.start("--concurrency", "2", **FLOWS)
        seen = len(probe(redis_ns, "steps"))
        wait_until(lambda seen=seen: len(probe(redis_ns, "steps")) > seen or
                   status(call) == "succeeded", timeout=20, why=worker.output)  # fmt: skip
        time.sleep(0.1 + 0.15 * kills)  # during a step, then between steps
        children = worker.children()
        if kills % 2:  # the supervisor alone: its children must not outlive it
            os.kill(worker.pid, signal.SIGKILL)
            worker.process.wait(timeout=10)  # type: ignore[union-attr]
            wait_until(lambda children=children: not any(alive(p) for p in children),
                       timeout=5, why=worker.output)  # fmt: skip
        else:
            worker.kill()
        kills += 1
    worker.start("--concurrency", "2", **FLOWS)
    finished(call, worker, timeout=40)
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded", worker.output()
    assert run.output == ["s0-done", "s1-done", "s2-done"]
    assert probe(redis_ns, "rerun") == []
    assert kills >= 3, worker.output()


def test_sleep__survives_a_worker_restart(worker: Worker, redis_ns: RedisNamespace) -> None:
    call = NapFlow.start(Nap(seconds=2))
    worker.start(**FLOWS)
    wait_until(lambda: status(call) == "sleeping", timeout=20, why=worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    worker.start(**FLOWS)
    finished(call, worker)
    assert get_run(call).output == ["before-done", "after-done"]  # type: ignore[union-attr]
    assert [s.split(":")[1] for s in probe(redis_ns, "steps")] == ["before", "after"]


def test_replay__two_workers_never_replay_one_call_at_once(
    worker: Worker, redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    calls = [OverlapFlow.start(Steps(n=2)) for _ in range(1000)]
    for call in calls[::2]:
        publish(call, OverlapFlow.name)  # duplicates race for the call
    other = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "other.log")
    try:
        worker.start("--concurrency", "4", **FLOWS)
        other.start("--concurrency", "4", **FLOWS)
        wait_until(lambda: all(status(c) == "succeeded" for c in calls[-50:]), timeout=60,
                   why=worker.output)  # fmt: skip
        wait_until(lambda: all(status(c) == "succeeded" for c in calls), timeout=30)
    finally:
        other.kill()
    assert probe(redis_ns, "overlap") == []
    assert probe(redis_ns, "rerun") == []
    assert len(probe(redis_ns, "steps")) == 2000


def test_frozen__a_thawed_worker_cannot_overwrite_the_step_another_redid(
    worker: Worker, redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    call = FrozenFlow.start(Frozen(pause=1.5))
    worker.start(**FLOWS)
    wait_until(lambda: probe(redis_ns, "steps"), timeout=20, why=worker.output)
    frozen = [worker.pid, *worker.children()]
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    other = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "other.log")
    try:
        other.start(**FLOWS)
        wait_until(lambda: len(probe(redis_ns, "steps")) == 2, timeout=30, why=other.output)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        finished(call, other, timeout=30)
        # The thawed run is interrupted (its lease is lost), or its write is refused.
        wait_until(lambda: "lost its lease" in worker.output() or "replay lease lost" in
                   worker.output(), timeout=20, why=worker.output)  # fmt: skip
        first_pid = probe(redis_ns, "steps")[0].split(":")[2]
        second_pid = probe(redis_ns, "steps")[1].split(":")[2]
        run = get_run(call)
        assert run is not None
        assert run.status == "succeeded"
        assert run.output == f"slow-{second_pid}", (worker.output(), other.output())
        meta = redis_ns.client.hget(f"{redis_ns.namespace}:flows:{{{call}}}_meta", "v:slow")
        assert meta == f'"slow-{second_pid}"'.encode(), (worker.output(), other.output())
        assert first_pid != second_pid
        assert len(probe(redis_ns, "steps")) == 2
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        other.kill()


def test_signals_and_cancel__with_a_worker(worker: Worker, redis_ns: RedisNamespace) -> None:
    early = WaitFlow.start(Wait())
    assert send_signal(early, "go", "early") is True
    waiting = WaitFlow.start(Wait())
    forever = WaitFlow.start(Wait())
    timed = WaitFlow.start(Wait(timeout=0.5))
    worker.start(**FLOWS)
    wait_until(lambda: status(waiting) == "waiting" and status(forever) == "waiting",
               timeout=20, why=worker.output)  # fmt: skip
    assert send_signal(waiting, "go", 1) is True
    assert send_signal(waiting, "go", 2) is False
    from django_jobs.flows import cancel

    assert cancel(forever, "no longer needed") is True
    assert status(forever) == "canceled"  # at once
    for call in (early, waiting, timed):
        finished(call, worker)
    assert get_run(early).output == {"value": "early", "received": True}  # type: ignore[union-attr]
    assert get_run(waiting).output == {"value": 1, "received": True}  # type: ignore[union-attr]
    assert get_run(timed).output == {"value": None, "received": False}  # type: ignore[union-attr]
    assert send_signal(timed, "go", 3) is False


def test_unknown_flow__its_event_survives_until_a_worker_that_knows_it(
    worker: Worker, redis_ns: RedisNamespace, monkeypatch: object
) -> None:
    call = start_call("shop.Ghost", "ghost-1", {"n": 1, "pause": 0.0, "label": ""}, {}, None)
    worker.start(**FLOWS)
    wait_until(lambda: worker.output().count("unknown flow 'shop.Ghost'") >= 3, timeout=20,
               why=worker.output)  # fmt: skip
    worker.signal(signal.SIGTERM)
    worker.wait()
    os.environ["SHOP_GHOST"] = "1"
    try:
        worker.start(**FLOWS)
    finally:
        del os.environ["SHOP_GHOST"]
    finished(call, worker)
    assert get_run(call).output == "s0-done"  # type: ignore[union-attr]


def test_parallel__a_fan_out_of_1000_with_limit_10_never_runs_more_than_10(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    call = FanOutFlow.start(FanOut(n=1000, limit=10, pause=0.001))
    worker.start(**FLOWS)
    finished(call, worker, timeout=60)
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded", run.error
    assert run.output == sum(range(1000))
    seen = [int(x) for x in probe(redis_ns, "concurrency")]
    assert len(seen) == 1000
    assert max(seen) <= 10


def test_cancel__a_running_step_is_asked_to_stop(worker: Worker, redis_ns: RedisNamespace) -> None:
    from django_jobs.flows import cancel

    call = FrozenFlow.start(Frozen(pause=30))
    worker.start(**FLOWS)
    wait_until(lambda: probe(redis_ns, "steps"), timeout=20, why=worker.output)
    started = time.monotonic()
    assert cancel(call, "too slow") is True
    finished(call, worker, timeout=10)
    assert time.monotonic() - started < 5  # interrupted, not waited for
    run = get_run(call)
    assert run is not None
    assert run.status == "canceled"
    assert run.error == "canceled: too slow"
    assert worker.children()  # the child went on to serve, not killed


def test_renewal__a_step_longer_than_the_replay_lease_is_recorded_once(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # FLOW_REPLAY_LEASE 2 s: only the supervisor's renewals keep a 4 s step's replay alive.
    call = FrozenFlow.start(Frozen(pause=4))
    worker.start(**FLOWS)
    finished(call, worker, timeout=30)
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded", worker.output()
    assert len(probe(redis_ns, "steps")) == 1, worker.output()
    assert "replay lease lost" not in worker.output()
