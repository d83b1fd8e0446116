"""ctx.step(atomic=True) in this process: the step's writes and its ProcessedTask row commit
together, a raise rolls both back, and a committed step is never run again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs.conf import get_settings
from django_jobs.flows import Context, Flow, get_run
from django_jobs.flows.atomic import step_key
from django_jobs.flows.events import publish, store
from django_jobs.models import ProcessedTask
from django_jobs.testing import run_burst
from testproject.probes.models import Effect
from testproject.shop.people import AtomicCharge, Charge
from tests.conftest import RedisNamespace, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def key_of(call: str, step: str) -> str:
    """The ProcessedTask key of a run's atomic step: under the run's nonce."""
    (state,) = store().read([call])
    assert state is not None
    assert state.meta.get("nonce")
    return step_key(call, step, state.meta["nonce"])


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
    assert ProcessedTask.objects.filter(key=key_of(call, "charge")).count() == 1


def test_atomic_step__a_raise_rolls_back_its_writes_and_its_row(redis_ns: RedisNamespace) -> None:
    call = FailingAtomic.start(Tag("boom"))
    wait_until(lambda: drain() or get_run(call).status == "failed", timeout=10)  # type: ignore[union-attr]
    run = get_run(call)
    assert run is not None
    assert "after its write" in run.error
    assert not Effect.objects.filter(key__startswith="boom").exists()
    assert not ProcessedTask.objects.filter(key=key_of(call, "w")).exists()
    assert run.steps[0].attempts == 2


def test_step_key__long_names_are_digested() -> None:
    assert step_key("c", "s") == "flow:c:s"
    assert len(step_key("c" * 100, "s" * 300)) < 100


def test_atomic_step__a_call_id_reused_after_the_run_expired_runs_its_steps_again(
    redis_ns: RedisNamespace,
) -> None:
    call = AtomicCharge.start(Charge(tag="a"), call_id="order-42")
    drain()
    first = key_of(call, "charge")
    # FLOW_RETENTION (7 days) passes: the call's keys expire, its rows (30 days) do not
    for key in redis_ns.client.keys(f"{redis_ns.namespace}:*{{order-42}}*"):
        redis_ns.client.delete(key)
    assert get_run(call) is None
    AtomicCharge.start(Charge(tag="b"), call_id="order-42")
    drain()
    run = get_run(call)
    assert run is not None
    assert (run.status, run.output) == ("succeeded", "b-written")  # red before: failed
    assert key_of(call, "charge") != first
    assert Effect.objects.filter(key="b").count() == 1


def test_step_key__a_run_without_a_nonce_keeps_its_key() -> None:
    assert step_key("c", "s", "n1") == "flow:c:n1:s"
    assert len(step_key("c" * 100, "s" * 300, "n" * 32)) < 100
