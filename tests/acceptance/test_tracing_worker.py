"""A real runworker continues the trace a task carries: the worker's spans go to a file (an
OpenTelemetry provider set up at start by a sitecustomize of the test's own, as a project's
start-up code would), the test's span is their ancestor."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_jobs import tracing
from testproject.probes.async_jobs import AsyncSleep
from testproject.probes.jobs import Noop, Number, Work
from tests.acceptance.conftest import Worker, probe
from tests.conftest import RedisNamespace, wait_until

SITECUSTOMIZE = """
import os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from django_jobs import tracing

provider = TracerProvider()
out = open(os.environ["SPANS_FILE"], "a", buffering=1)
provider.add_span_processor(SimpleSpanProcessor(
    ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\\n")
))
trace.set_tracer_provider(provider)
tracing.enable()
"""


@pytest.fixture
def traced() -> Iterator[InMemorySpanExporter]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.disable()


@pytest.fixture
def spans_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a worker started from this test writes its spans (SITECUSTOMIZE on its path)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    spans_file = tmp_path / "spans.jsonl"
    monkeypatch.setenv("SPANS_FILE", str(spans_file))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return spans_file


def spans(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_runworker_continues_the_trace_of_the_enqueue(
    worker: Worker, redis_ns: RedisNamespace, spans_file: Path, traced: InMemorySpanExporter
) -> None:
    Noop.enqueue(Number(1))
    (enqueue,) = traced.get_finished_spans()
    assert enqueue.context is not None

    worker.start("--concurrency", "1")

    def run_span() -> dict[str, object] | None:
        return next((s for s in spans(spans_file) if s["name"] == f"run {Noop.name}"), None)

    run = wait_until(run_span, timeout=30, why=worker.output)
    assert run["context"]["trace_id"] == f"0x{enqueue.context.trace_id:032x}"  # type: ignore[index]
    assert run["parent_id"] == f"0x{enqueue.context.span_id:016x}"


def test_runworker_async_child_continues_each_runs_own_trace(
    worker: Worker, redis_ns: RedisNamespace, spans_file: Path, traced: InMemorySpanExporter
) -> None:
    # Given two async tasks enqueued under two traces, run at once by one async child
    handles = [AsyncSleep.enqueue(Work(f"t{i}", seconds=0.3)) for i in range(2)]
    enqueues = dict(zip([h.id for h in handles], traced.get_finished_spans(), strict=True))

    worker.start("--concurrency", "1", "--async-concurrency", "4")

    def run_spans() -> list[dict[str, Any]] | None:
        found = [s for s in spans(spans_file) if s["name"] == f"run {AsyncSleep.name}"]
        return found if len(found) == 2 else None

    # Then each run's span is the child of its own task's enqueue span, not of the other's
    for run in wait_until(run_spans, timeout=30, why=worker.output):
        enqueue = enqueues[run["attributes"]["django_jobs.task_id"]]
        assert enqueue.context is not None
        assert run["context"]["trace_id"] == f"0x{enqueue.context.trace_id:032x}"
        assert run["parent_id"] == f"0x{enqueue.context.span_id:016x}"
    # And both ran in one child ("tag start end pid" each), at once: one loop, two contexts
    raw = redis_ns.client.lrange(probe(redis_ns, "spans"), 0, -1)
    listed = sorted((x.decode() if isinstance(x, bytes) else x).split() for x in raw)
    assert [tag for tag, *_ in listed] == ["t0", "t1"]
    assert len({pid for *_, pid in listed}) == 1, listed
    (_, ended_0), (begun_1, _) = sorted((float(b), float(e)) for _, b, e, _ in listed)
    assert begun_1 < ended_0
