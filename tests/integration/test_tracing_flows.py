"""OpenTelemetry and flows (issue 21: "and into a flow's steps"): a flow started under a
request's span runs every step in that request's trace, across the events that drive it (a
sleep's timer too), with an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_jobs import tracing
from django_jobs.conf import get_settings
from django_jobs.flows import get_run
from django_jobs.flows.events import FLOW_EVENT
from django_jobs.testing import run_burst
from testproject.shop import flows as shop
from testproject.shop.flows import Nap, NapFlow, Steps, StepsFlow
from tests.conftest import RedisNamespace, wait_until

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))


@pytest.fixture
def step_traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Trace on; each step of the shop's flows notes the trace id current while it runs."""
    seen: dict[str, int] = {}
    record = shop.record

    def traced_record(call_id: str, name: str, *args: Any) -> Any:
        seen[name] = trace.get_current_span().get_span_context().trace_id
        return record(call_id, name, *args)

    monkeypatch.setattr(shop, "record", traced_record)
    exporter.clear()
    tracing.enable(provider)
    yield seen
    tracing.disable()


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def start_in_a_request(start: Any) -> tuple[str, int]:
    """Start a flow under a server span (as a view would); its call id and the trace id."""
    with provider.get_tracer("web").start_as_current_span("POST /orders") as span:
        call = start()
    return call, span.get_span_context().trace_id


def test_a_flow_started_in_a_request_runs_its_steps_in_that_trace(
    redis_ns: RedisNamespace, step_traces: dict[str, int]
) -> None:
    call, request_trace = start_in_a_request(lambda: StepsFlow.start(Steps(n=3)))

    drain()

    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert step_traces == {"s0": request_trace, "s1": request_trace, "s2": request_trace}
    runs = [s for s in exporter.get_finished_spans() if s.name == f"run {FLOW_EVENT}"]
    assert runs
    assert all(s.context is not None and s.context.trace_id == request_trace for s in runs)


def test_a_flows_steps_after_a_sleep_stay_in_the_trace(
    redis_ns: RedisNamespace, step_traces: dict[str, int]
) -> None:
    call, request_trace = start_in_a_request(lambda: NapFlow.start(Nap(seconds=0.2)))

    def succeeded() -> bool:
        drain()
        run = get_run(call)
        return run is not None and run.status == "succeeded"

    wait_until(succeeded, timeout=10)
    assert step_traces == {"before": request_trace, "after": request_trace}
    enqueues = [s for s in exporter.get_finished_spans() if s.name == f"enqueue {FLOW_EVENT}"]
    assert len(enqueues) >= 2  # the start, then the sleep's timer
    assert all(s.context is not None and s.context.trace_id == request_trace for s in enqueues)
