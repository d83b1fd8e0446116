"""Test flows: each step records that it ran in Redis (the tests' namespace), so a test can
tell that no recorded step ever ran twice."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings

from django_jobs.flows import Context, Flow


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.JOBS["REDIS_URL"])


def _probe(name: str) -> str:
    return f"{settings.JOBS.get('NAMESPACE', 'jobs')}:probe:{name}"


def _status_key(call_id: str) -> str:
    jobs = settings.JOBS
    flows = jobs.get("FLOWS_NAMESPACE", "flows")
    return f"{jobs.get('NAMESPACE', 'jobs')}:{flows}:{{{call_id}}}_status"


def record(call_id: str, step: str, pause: float = 0.0) -> str:
    """A step's body: count its run, optionally pause (a window to kill the worker in).

    A run of a step whose result is already recorded is pushed to the probe "rerun": the one
    thing that must never happen."""
    client = _redis()
    done = client.hget(_status_key(call_id), f"step:{step}")
    if done and b'"state":"done"' in done:
        client.rpush(_probe("rerun"), f"{call_id}:{step}")
    client.rpush(_probe("steps"), f"{call_id}:{step}:{os.getpid()}")
    if pause:
        time.sleep(pause)
    return f"{step}-done"


def record_pid(call_id: str, step: str, pause: float = 0.0) -> str:
    """record(), returning the pid that ran it."""
    record(call_id, step, pause)
    return f"{step}-{os.getpid()}"


@dataclass
class Steps:
    n: int = 3
    pause: float = 0.0
    label: str = ""


class StepsFlow(Flow[Steps]):
    """n steps in a row; returns their values."""

    def run(self, ctx: Context, input: Steps) -> Any:
        return [
            ctx.step(f"s{i}", record, ctx.call_id, f"s{i}", input.pause) for i in range(input.n)
        ]


@dataclass
class Nap:
    seconds: float = 1.0


class NapFlow(Flow[Nap]):
    def run(self, ctx: Context, input: Nap) -> Any:
        before = ctx.step("before", record, ctx.call_id, "before")
        ctx.sleep("nap", input.seconds)
        return [before, ctx.step("after", record, ctx.call_id, "after")]


@dataclass
class Wait:
    timeout: float | None = None
    early: bool = False


class WaitFlow(Flow[Wait]):
    def run(self, ctx: Context, input: Wait) -> Any:
        value, received = ctx.wait_for_signal("go", timeout=input.timeout)
        return {"value": value, "received": received}


def _concurrent(call_id: str, i: int, pause: float) -> int:
    client = _redis()
    now = client.incr(_probe("running"))
    client.rpush(_probe("concurrency"), now)
    try:
        if pause:
            time.sleep(pause)
    finally:
        client.decr(_probe("running"))
    return i


@dataclass
class FanOut:
    n: int = 100
    limit: int = 10
    pause: float = 0.0


class FanOutFlow(Flow[FanOut]):
    def run(self, ctx: Context, input: FanOut) -> Any:
        calls = [(lambda i=i: _concurrent(ctx.call_id, i, input.pause)) for i in range(input.n)]
        values = ctx.parallel("items", calls, limit=input.limit)
        return sum(values)


@dataclass
class Flaky:
    failures: int = 1
    attempts: int = 3
    hooks: list[str] = field(default_factory=list)


def flaky(call_id: str, failures: int) -> str:
    runs = _redis().incr(_probe(f"flaky:{call_id}"))
    if runs <= failures:
        raise RuntimeError(f"failure {runs}")
    return "ok"


class FlakyFlow(Flow[Flaky]):
    def run(self, ctx: Context, input: Flaky) -> Any:
        return ctx.step("flaky", flaky, ctx.call_id, input.failures,
                        max_attempts=input.attempts, backoff=0.05)  # fmt: skip

    def on_success(self, ctx: Context, output: Any) -> None:
        _redis().rpush(_probe("hooks"), f"{ctx.call_id}:success:{output}")

    def on_failure(self, ctx: Context, error: BaseException) -> None:
        _redis().rpush(_probe("hooks"), f"{ctx.call_id}:failure:{error}")


@dataclass
class Frozen:
    pause: float = 6.0


class FrozenFlow(Flow[Frozen]):
    """One slow step, to freeze its worker in."""

    def run(self, ctx: Context, input: Frozen) -> Any:
        return ctx.step("slow", record_pid, ctx.call_id, "slow", input.pause)


class OverlapFlow(Flow[Steps]):
    """Records any moment two replays of one call run at once (the probe "overlap")."""

    def run(self, ctx: Context, input: Steps) -> Any:
        client = _redis()
        key = _probe(f"replaying:{ctx.call_id}")
        if client.incr(key) > 1:
            client.rpush(_probe("overlap"), ctx.call_id)
        try:
            return [ctx.step(f"s{i}", record, ctx.call_id, f"s{i}") for i in range(input.n)]
        finally:
            client.decr(key)


if os.environ.get("SHOP_GHOST"):  # a flow only some workers know (a rolling deploy)

    class GhostFlow(Flow[Steps]):
        name = "shop.Ghost"

        def run(self, ctx: Context, input: Steps) -> Any:
            return ctx.step("s0", record, ctx.call_id, "s0")


def noop(i: int) -> int:
    return i


@dataclass
class NoopSteps:
    n: int = 3


class BenchSteps(Flow[NoopSteps]):
    """n no-op steps (the benchmark's flow)."""

    def run(self, ctx: Context, input: NoopSteps) -> Any:
        return sum(ctx.step(f"s{i}", noop, i) for i in range(input.n))


@dataclass
class StepsThenNap:
    n: int = 10
    seconds: float = 0.05


class BenchNap(Flow[StepsThenNap]):
    """n no-op steps, then a sleep: its timer's event is a memoised replay."""

    def run(self, ctx: Context, input: StepsThenNap) -> Any:
        total = sum(ctx.step(f"s{i}", noop, i) for i in range(input.n))
        ctx.sleep("nap", input.seconds)
        return total


class WaitThenNap(Flow[Wait]):
    """A wait that may time out, then a sleep: replays after the wait see its outcome again."""

    def run(self, ctx: Context, input: Wait) -> Any:
        value, received = ctx.wait_for_signal("go", timeout=input.timeout)
        ctx.sleep("after", 0.3)
        return {"value": value, "received": received}


from testproject.shop import people as people  # noqa: E402  (issue 17's flows: discovered here)
