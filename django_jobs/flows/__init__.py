"""Durable flows: multi-step work as one plain Python function, replayed on our own broker.

    class CloseOrder(Flow[CloseOrderInput, Closed]):
        paid = Signal[int]("paid")

        def run(self, ctx, input):
            order = ctx.step("create", create_order, input.cart_id, atomic=True)
            ctx.sleep("grace", timedelta(minutes=30))
            amount, received = ctx.wait_for_signal(self.paid, timeout=timedelta(days=1))
            ...

See docs/flows.rst: the replay model and its one rule (code outside steps is deterministic),
typing, versioning (ctx.version, NonDeterministicFlow), atomic steps, first_of, child flows,
storage, fencing, queues and namespaces.
"""

from django_jobs.flows.base import Flow, registry
from django_jobs.flows.context import Context
from django_jobs.flows.engine import FlowEvent
from django_jobs.flows.errors import FlowError, NonDeterministicFlow, StepFailed, UnknownFlow
from django_jobs.flows.events import FlowEventPayload
from django_jobs.flows.first import Winner
from django_jobs.flows.runs import (
    STATUSES,
    Run,
    RunPage,
    StepInfo,
    cancel,
    get_run,
    list_runs,
    send_signal,
)
from django_jobs.flows.signals import Signal

__all__ = [
    "STATUSES",
    "Context",
    "Flow",
    "FlowError",
    "FlowEvent",
    "FlowEventPayload",
    "NonDeterministicFlow",
    "Run",
    "RunPage",
    "Signal",
    "StepFailed",
    "StepInfo",
    "UnknownFlow",
    "Winner",
    "cancel",
    "get_run",
    "list_runs",
    "registry",
    "send_signal",
]
