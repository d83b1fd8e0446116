"""What a flow costs: starts per second, Redis round trips per event, step overhead against a
plain job, and end-to-end latency on an idle worker.

    .venv/bin/python -m bench.flows [--quick] [--redis-url URL]

`python -m bench` runs it at its end (`--quick` with --quick). Redis: a private redis-server
(bench.common) unless --redis-url. Phases:

1. ``starts``: N `StepsFlow.start()` calls, one at a time: starts/s and round trips per start.
2. ``memoised replay``: a 10-step flow whose steps are all done and that sleeps at its end; its
   timer's event replays it: the engine's round trips for that event (counted on the wire:
   every packet of commands this process sends), against the target of 2.
3. ``step overhead``: a 10-step flow replayed in this process (events taken by the in-process
   consumer, as `run_burst` does): round trips and time per executed step, beside a plain
   no-op job's enqueue, dequeue and ack.
4. ``end to end``: a real `runworker` (concurrency 2), idle; a 3-step and a 10-step flow of
   no-op steps started one at a time, M times each: from the start script to the finish
   write, both by Redis' own clock (`created_at`, `finished_at`): p50 and p95 in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import delete_namespace, private_redis

ROOT = Path(__file__).resolve().parents[1]
FULL = (2000, 50)
QUICK = (300, 15)
TARGET_ROUND_TRIPS = 2


class Counter:
    """Round trips this process sends to Redis: one per packet of commands."""

    count = 0

    @classmethod
    @contextmanager
    def installed(cls) -> Iterator[type[Counter]]:
        from redis.connection import AbstractConnection

        original = AbstractConnection.send_packed_command

        def counting(self: Any, command: Any, check_health: bool = True) -> None:
            cls.count += 1
            original(self, command, check_health)

        AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
        try:
            yield cls
        finally:
            AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def _setup(redis_url: str) -> str:
    import logging

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["REDIS_URL"] = redis_url
    namespace = f"bench-flows-{uuid.uuid4().hex[:8]}"
    os.environ["JOBS_NAMESPACE"] = namespace
    django.setup()
    logging.getLogger("django_jobs").setLevel(logging.ERROR)
    return namespace


def measure(redis_url: str, starts: int, rounds: int) -> dict[str, Any]:
    namespace = _setup(redis_url)
    from django_jobs.broker.factory import get_broker
    from django_jobs.conf import get_settings
    from django_jobs.flows import get_run
    from django_jobs.flows.engine import replay
    from django_jobs.flows.events import FlowEventPayload
    from django_jobs.testing import run_burst
    from testproject.probes.jobs import Noop, Number
    from testproject.shop.flows import BenchNap, BenchSteps, NoopSteps, StepsThenNap

    queues = list(get_settings().flow_queues)
    out: dict[str, Any] = {}
    with Counter.installed() as counter:
        BenchSteps.start(NoopSteps(n=1))  # warm-up: connections, scripts
        counter.count = 0
        began = time.perf_counter()
        for _ in range(starts):
            BenchSteps.start(NoopSteps(n=1))
        seconds = time.perf_counter() - began
        out["starts_per_s"] = starts / seconds
        out["round_trips_per_start"] = counter.count / starts
        run_burst(queues)

        # 2. a memoised replay: 10 steps done, a sleep due now
        call = BenchNap.start(StepsThenNap(n=10, seconds=0.05))
        run_burst(queues)
        time.sleep(0.06)
        payload = FlowEventPayload(call, BenchNap.name)
        counter.count = 0
        replay(payload, None)
        out["memoised_replay_round_trips"] = counter.count
        run = get_run(call)
        assert run is not None
        assert run.status == "succeeded", run

        # 3. step overhead, in this process
        call = BenchSteps.start(NoopSteps(n=10))
        counter.count = 0
        began = time.perf_counter()
        run_burst(queues)
        flow_seconds = time.perf_counter() - began
        out["flow_10_steps_round_trips"] = counter.count
        out["flow_10_steps_ms"] = flow_seconds * 1000
        Noop.enqueue(Number(0))
        run_burst(["default"])
        counter.count = 0
        began = time.perf_counter()
        for _ in range(10):
            Noop.enqueue(Number(0))
            run_burst(["default"])
        out["jobs_10_round_trips"] = counter.count
        out["jobs_10_ms"] = (time.perf_counter() - began) * 1000

    # 4. end to end on an idle worker
    env = {**os.environ, "DATABASE_URL": "sqlite:///:memory:", "PYTHONUNBUFFERED": "1"}
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--concurrency", "2"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for n in (3, 10):
            laps = []
            for i in range(rounds + 1):
                time.sleep(0.05)  # idle: every child blocks on its wake-up key
                call = BenchSteps.start(NoopSteps(n=n))
                deadline = time.monotonic() + 30
                while (run := get_run(call)) is None or run.finished_at is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"flow {call} did not finish within 30 s")
                    time.sleep(0.002)
                assert run.created_at is not None
                if i:  # the first is a warm-up
                    laps.append((run.finished_at - run.created_at).total_seconds() * 1000)
            laps.sort()
            out[f"end_to_end_{n}_steps_p50_ms"] = statistics.median(laps)
            out[f"end_to_end_{n}_steps_p95_ms"] = laps[int(len(laps) * 0.95) - 1]
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    delete_namespace(get_broker().client, namespace)
    return out


def report(result: dict[str, Any], starts: int, rounds: int) -> str:
    r = result
    lines = [
        f"Flows ({starts} starts; end to end: {rounds} runs each, on an idle worker)",
        f"  starts:            {r['starts_per_s']:,.0f}/s, "
        f"{r['round_trips_per_start']:.1f} round trips each",
        f"  memoised replay:   {r['memoised_replay_round_trips']} round trips for the event of a "
        f"10-step flow (target <= {TARGET_ROUND_TRIPS})",
        f"  10 steps, 1 flow:  {r['flow_10_steps_round_trips']} round trips, "
        f"{r['flow_10_steps_ms']:.1f} ms in this process (start excluded)",
        f"  10 no-op jobs:     {r['jobs_10_round_trips']} round trips, {r['jobs_10_ms']:.1f} ms "
        f"(enqueue, dequeue, ack each)",
        f"  end to end:        3 steps p50 {r['end_to_end_3_steps_p50_ms']:.1f} ms "
        f"(p95 {r['end_to_end_3_steps_p95_ms']:.1f}); 10 steps p50 "
        f"{r['end_to_end_10_steps_p50_ms']:.1f} ms (p95 {r['end_to_end_10_steps_p95_ms']:.1f}); "
        f"anchors: DBOS ~20 ms per step, Restate ~50 ms for 3 steps; target < 10 ms for 3",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--redis-url")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    starts, rounds = QUICK if args.quick else FULL
    if args.redis_url:
        result = measure(args.redis_url, starts, rounds)
    else:
        with private_redis() as url:
            result = measure(url, starts, rounds)
    print(report(result, starts, rounds))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
