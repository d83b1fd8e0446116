"""Versioning: a flow's code changed while runs are in flight (a deploy, simulated by putting
the next version's class under the flow's name in the registry)."""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs.conf import get_settings
from django_jobs.flows import Context, Flow, NonDeterministicFlow, get_run, registry
from django_jobs.testing import run_burst
from testproject.shop.flows import record
from testproject.shop.people import Order, Sms
from tests.conftest import RedisNamespace, wait_until


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def steps_run(ns: RedisNamespace, call: str) -> list[str]:
    runs = [x.decode().split(":") for x in ns.client.lrange(f"{ns.namespace}:probe:steps", 0, -1)]
    return [step for c, step, _ in runs if c == call]


def deploy(monkeypatch: pytest.MonkeyPatch, cls: type[Flow[Any, Any]]) -> None:
    monkeypatch.setitem(registry.flows, Sms.name, cls)


def new_classes(monkeypatch: pytest.MonkeyPatch) -> tuple[type[Flow[Any]], type[Flow[Any]]]:
    monkeypatch.setattr(registry, "add", lambda cls: None)  # two classes under one name

    class SmsGated(Flow[Order]):
        """Version 2: an SMS before the charge, behind a gate."""

        name = Sms.name
        version = 2

        def run(self, ctx: Context, input: Order) -> Any:
            if ctx.version("send-sms", 2) >= 2:
                ctx.step("sms", record, ctx.call_id, "sms")
            ctx.step("charge", record, ctx.call_id, "charge")
            ctx.sleep("grace", input.grace)
            ctx.step("email", record, ctx.call_id, "email")
            return "v2" if ctx.version("send-sms", 2) >= 2 else "v1"

    class SmsUngated(Flow[Order]):
        """The same change without the gate."""

        name = Sms.name

        def run(self, ctx: Context, input: Order) -> Any:
            ctx.step("sms", record, ctx.call_id, "sms")
            ctx.step("charge", record, ctx.call_id, "charge")
            ctx.sleep("grace", input.grace)
            ctx.step("email", record, ctx.call_id, "email")
            return "v2"

    return SmsGated, SmsUngated


def finish(*calls: str) -> None:
    wait_until(
        lambda: drain() or all(get_run(c).status in ("succeeded", "failed") for c in calls),  # type: ignore[union-attr]
        timeout=10,
    )


def test_version_gate__old_runs_finish_on_the_old_path_new_runs_take_the_new_one(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Sms.start(Order(grace=0.2))
    drain()
    assert get_run(old).status == "sleeping"  # type: ignore[union-attr]
    gated, _ = new_classes(monkeypatch)
    deploy(monkeypatch, gated)
    new = gated.start(Order(grace=0.2))
    finish(old, new)

    old_run, new_run = get_run(old), get_run(new)
    assert old_run is not None
    assert new_run is not None
    assert (old_run.status, old_run.output, old_run.version) == ("succeeded", "v1", 1)
    assert steps_run(redis_ns, old) == ["charge", "email"]
    assert (new_run.status, new_run.output, new_run.version) == ("succeeded", "v2", 2)
    assert steps_run(redis_ns, new) == ["sms", "charge", "email"]
    assert [s.name for s in new_run.steps] == ["sms", "charge", "grace", "email"]


def test_a_different_step_order_fails_the_run_naming_both_steps(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Sms.start(Order(grace=0.2))
    drain()
    _, ungated = new_classes(monkeypatch)
    deploy(monkeypatch, ungated)
    finish(old)

    run = get_run(old)
    assert run is not None
    assert run.status == "failed"
    assert "NonDeterministicFlow" in run.error
    assert "step 'sms'" in run.error, run.error
    assert "step 'charge'" in run.error, run.error
    assert steps_run(redis_ns, old) == ["charge"]  # nothing ran past the violation


def test_a_violation_caught_by_the_flow_still_fails_the_run(redis_ns: RedisNamespace) -> None:
    from django_jobs.flows.context import Context as Ctx
    from django_jobs.flows.events import store

    call = Sms.start(Order(grace=0.2))
    drain()
    s = store()
    acquired = s.acquire(call)
    ctx = Ctx(s, call, Sms.name, acquired.epoch, acquired.meta, acquired.status)
    with pytest.raises(NonDeterministicFlow) as caught:
        ctx.step("email", record, call, "email")
    assert caught.value.asked == "step:email"
    assert caught.value.recorded == "step:charge"
    with pytest.raises(NonDeterministicFlow):  # every later record too
        ctx.step("other", record, call, "other")
    assert steps_run(redis_ns, call) == ["charge"]


def test_a_run_of_a_newer_version_is_put_back_by_a_worker_of_an_older_one(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "FLOW_UNKNOWN_DELAY": 0.05}
    gated, _ = new_classes(monkeypatch)
    call = gated.start(Order(grace=0.05))  # started by a worker already on version 2
    drain()  # this process still has version 1 under the name: the event goes back
    run = get_run(call)
    assert run is not None
    assert run.status == "running"
    assert run.steps == []  # nothing ran on the old code
    scheduled = f"{redis_ns.namespace}:{{{get_settings().flow_queues[0]}}}:scheduled"
    assert redis_ns.client.zcard(scheduled) == 1

    deploy(monkeypatch, gated)
    finish(call)
    assert get_run(call).output == "v2"  # type: ignore[union-attr]
