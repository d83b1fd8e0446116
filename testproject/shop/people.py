"""Test flows of issue 17 (durable flows for people): versioning, a typed flow with a typed
signal, an atomic step, first_of and child flows. Imported by shop/flows.py (discovered)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

from django_jobs.flows import Context, Flow, Signal, atomic
from testproject.probes.models import Effect
from testproject.shop.flows import Nap, NapFlow, Steps, StepsFlow, _probe, _redis, record


@dataclass
class Order:
    order_id: int = 1
    grace: float = 0.05


class Sms(Flow[Order]):
    """Version 1 of a flow whose next version adds an SMS first (tests/integration/
    test_flows_versioning.py deploys it while runs of this one are in flight)."""

    name = "shop.Sms"

    def run(self, ctx: Context, input: Order) -> Any:
        ctx.step("charge", record, ctx.call_id, "charge")
        ctx.sleep("grace", input.grace)
        ctx.step("email", record, ctx.call_id, "email")
        return "v1"


@dataclass
class Receipt:
    order_id: int
    approved: bool


class Approve(Flow[Order, Receipt]):
    """Typed end to end: Order in, Receipt out, a bool signal."""

    approved = Signal[bool]("approved")

    def run(self, ctx: Context, input: Order) -> Receipt:
        value, received = ctx.wait_for_signal(self.approved, timeout=input.grace or None)
        return Receipt(input.order_id, bool(received and value))


@dataclass
class Charge:
    tag: str = "charge"


def write_effect(tag: str) -> str:
    """An atomic step's body: one Effect row, and its run counted in Redis."""
    Effect.objects.create(key=tag, pid=os.getpid())
    _redis().rpush(_probe("atomic-runs"), f"{tag}:{os.getpid()}")
    return f"{tag}-written"


class AtomicCharge(Flow[Charge]):
    def run(self, ctx: Context, input: Charge) -> Any:
        value = ctx.step("charge", write_effect, input.tag, atomic=True)
        ctx.step("after", record, ctx.call_id, "after")
        return value


def _kill_after_commit(ctx: Context, name: str) -> None:
    """Test-only: a run started with metadata {"kill_after_commit": true} kills its worker
    after its atomic step committed, once per call, before Redis hears of it."""
    if ctx.metadata.get("kill_after_commit") and _redis().hsetnx(
        _probe("killed-after-commit"), ctx.call_id, os.getpid()
    ):
        os.kill(os.getpid(), signal.SIGKILL)


atomic.after_commit = _kill_after_commit


@dataclass
class First:
    timeout: float | None = 0.05
    #: A sleep after first_of: signals still arrive at a run that goes on.
    then: float = 0.0


class FirstOf(Flow[First]):
    stop = Signal[int]("stop")

    def run(self, ctx: Context, input: First) -> Any:
        first = ctx.first_of("pick", "go", self.stop, timeout=input.timeout)
        if input.then:
            ctx.sleep("then", input.then)
        return {"winner": first.signal, "value": first.value, "timed_out": first.timed_out}


@dataclass
class Family:
    nap: float = 0.05
    fail: bool = False


class Parent(Flow[Family]):
    """An awaited child, a detached one, then an awaited sleeping one."""

    def run(self, ctx: Context, input: Family) -> Any:
        steps = ctx.start_child(StepsFlow, Steps(n=2), name="steps")
        detached = ctx.start_child(NapFlow, Nap(seconds=input.nap), name="bg", wait=False)
        napped = ctx.start_child(NapFlow, Nap(seconds=input.nap), name="nap")
        return {"steps": steps, "detached": detached, "nap": napped}
