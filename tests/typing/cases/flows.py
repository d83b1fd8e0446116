# Checked by mypy only (tests/typing/test_types.py); never imported by pytest.
# Each line ending in an "E" marker comment must produce a mypy error containing its text;
# every other line must type-check.
from dataclasses import dataclass
from typing import Any

from django_jobs.flows import Context, Flow, Signal, get_run, send_signal


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


@dataclass
class Receipt:
    order_id: int
    paid: bool


class Pay(Flow[CloseOrderInput, Receipt]):
    approved = Signal[bool]("approved")
    note = Signal[str]("note")

    def run(self, ctx: Context, input: CloseOrderInput) -> Receipt:
        value, received = ctx.wait_for_signal(self.approved)
        checked: bool | None = value
        text, _ = ctx.wait_for_signal(self.note)
        length: int = len(text or "")
        first = ctx.first_of("pick", self.approved, "other", timeout=3)
        winner: str | None = first.signal
        return Receipt(input.order_id + length + len(winner or ""), bool(received and checked))


pay_id = Pay.start(CloseOrderInput(order_id=2))
Pay.send_signal(pay_id, Pay.approved, True)
Pay.send_signal(pay_id, Pay.note, "late")
send_signal(pay_id, Pay.approved, False)
paid_run = Pay.get_run(pay_id)
receipt: Receipt | None = paid_run.output if paid_run else None
untyped = get_run(pay_id)
loose: object = untyped.output if untyped else None
Pay.start(Other(order_id=2))  # E: incompatible type "Other"
Pay.send_signal(pay_id, Pay.approved, "yes")  # E: Cannot infer value of type parameter "T"
Pay.send_signal(pay_id, Pay.note, 3)  # E: Cannot infer value of type parameter "T"
wrong: str | None = paid_run.output if paid_run else None  # E: Incompatible types
by_module = get_run(pay_id, Pay)
receipt_too: Receipt | None = by_module.output if by_module else None
none_run = CloseOrder.get_run(call_id)
nothing: None = none_run.output if none_run else None


class Parent(Flow[CloseOrderInput]):
    def run(self, ctx: Context, input: CloseOrderInput) -> Any:
        child_id: str = ctx.start_child(Pay, CloseOrderInput(order_id=1), wait=False)
        ctx.start_child(Pay, Other(order_id=1))  # E: Cannot infer value of type parameter "I"
        return child_id
