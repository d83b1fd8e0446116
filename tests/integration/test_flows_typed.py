"""Flow[Input, Output] with a typed Signal at run time (mypy's side: tests/typing)."""

from __future__ import annotations

import pytest

from django_jobs.conf import get_settings
from django_jobs.flows import FlowError, Signal, get_run
from django_jobs.testing import run_burst
from testproject.shop.flows import StepsFlow
from testproject.shop.people import Approve, Order, Receipt
from tests.conftest import RedisNamespace


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def test_typed_flow__signal_by_its_declaration_output_as_its_dataclass(
    redis_ns: RedisNamespace,
) -> None:
    call = Approve.start(Order(order_id=7, grace=0))
    drain()
    assert Approve.send_signal(call, Approve.approved, True) is True
    assert Approve.send_signal(call, Approve.approved, False) is False  # the first one won
    drain()

    run = Approve.get_run(call)
    assert run is not None
    assert run.output == Receipt(order_id=7, approved=True)
    assert get_run(call).output == {"order_id": 7, "approved": True}  # type: ignore[union-attr]
    assert Approve.output_type is Receipt
    assert StepsFlow.output_type is None
    assert Approve.get_run(StepsFlow.start(StepsFlow.input_type())) is None  # another flow's


def test_signal__names_are_checked() -> None:
    with pytest.raises(FlowError, match="non-empty"):
        Signal[int]("")
    assert Signal[int]("a") == Signal[str]("a")
    assert repr(Approve.approved) == "Signal('approved')"

    class Declared:
        approved = Signal[bool]()

    assert Declared.approved.name == "approved"
