"""ctx.step(atomic=True) in this process: the step's writes and its ProcessedTask row commit
together, a raise rolls both back, and a committed step is never run again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs.conf import get_settings
from django_jobs.flows import Context, Flow, get_run
from django_jobs.flows.atomic import step_key
from django_jobs.flows.events import publish
from django_jobs.models import ProcessedTask
from django_jobs.testing import run_burst
from testproject.probes.models import Effect
from testproject.shop.people import AtomicCharge, Charge
from tests.conftest import RedisNamespace, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


@dataclass
class Tag:
    tag: str


def write_then_fail_once(tag: str) -> str:
    Effect.objects.create(key=tag)
    if Effect.objects.filter(key=f"{tag}:failed").exists():
        return "second"
    Effect.objects.create(key=f"{tag}:failed")  # rolled back too: so this fails every time
    raise RuntimeError("after its write")


class FailingAtomic(Flow[Tag]):
    def run(self, ctx: Context, input: Tag) -> Any:
        return ctx.step("w", write_then_fail_once, input.tag, atomic=True, max_attempts=2,
                        backoff=0)  # fmt: skip


def test_atomic_step__commits_with_its_row_and_never_runs_again(redis_ns: RedisNamespace) -> None:
    call = AtomicCharge.start(Charge(tag="once"))
    drain()
    publish(call, AtomicCharge.name)  # a duplicate event
    drain()
    run = get_run(call)
    assert run is not None
    assert (run.status, run.output) == ("succeeded", "once-written")
    assert Effect.objects.filter(key="once").count() == 1
    assert ProcessedTask.objects.filter(key=step_key(call, "charge")).count() == 1


def test_atomic_step__a_raise_rolls_back_its_writes_and_its_row(redis_ns: RedisNamespace) -> None:
    call = FailingAtomic.start(Tag("boom"))
    wait_until(lambda: drain() or get_run(call).status == "failed", timeout=10)  # type: ignore[union-attr]
    run = get_run(call)
    assert run is not None
    assert "after its write" in run.error
    assert not Effect.objects.filter(key__startswith="boom").exists()
    assert not ProcessedTask.objects.filter(key=step_key(call, "w")).exists()
    assert run.steps[0].attempts == 2


def test_step_key__long_names_are_digested() -> None:
    assert step_key("c", "s") == "flow:c:s"
    assert len(step_key("c" * 100, "s" * 300)) < 100
