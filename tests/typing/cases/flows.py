# Checked by mypy only (tests/typing/test_types.py); never imported by pytest.
# Each line ending in an "E" marker comment must produce a mypy error containing its text;
# every other line must type-check.
from dataclasses import dataclass
from typing import Any

from django_jobs.flows import Context, Flow, get_run, send_signal


@dataclass
class CloseOrderInput:
    order_id: int


@dataclass
class Other:
    order_id: int


def load(order_id: int) -> dict[str, int]:
    return {"id": order_id}


class CloseOrder(Flow[CloseOrderInput]):
    def run(self, ctx: Context, input: CloseOrderInput) -> Any:
        order = ctx.step("load", load, input.order_id)
        total: int = order["id"]
        return total


call_id: str = CloseOrder.start(CloseOrderInput(order_id=1), metadata={"user": 1})
accepted: bool = send_signal(call_id, "paid", {"amount": 1})
run = get_run(call_id)
CloseOrder.start(Other(order_id=1))  # E: incompatible type "Other"
CloseOrder.start(CloseOrderInput(order=1))  # E: Unexpected keyword argument "order"
CloseOrder.start(CloseOrderInput(order_id=1), call_id=3)  # E: incompatible type "int"
