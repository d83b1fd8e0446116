"""OpenTelemetry (docs/metrics.rst): a request's trace goes on into its job through the task
record, with an in-memory exporter; the record's trace field and its version."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_jobs import tracing
from django_jobs.message import DecodeError, Message, decode, encode
from django_jobs.testing import run_burst
from testproject.probes.jobs import Chaos, ChaosWork, Noop, Number
from tests.conftest import RedisNamespace

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))


def signup(request: HttpRequest) -> HttpResponse:
    """A view under a server span, as opentelemetry-instrumentation-django would open it."""
    with provider.get_tracer("web").start_as_current_span("GET /signup"):
        handle = Noop.enqueue(Number(7))
    return HttpResponse(handle.id)


urlpatterns = [path("signup", signup)]


@pytest.fixture
def traced(settings: object) -> Iterator[InMemorySpanExporter]:
    settings.ROOT_URLCONF = __name__  # type: ignore[attr-defined]
    exporter.clear()
    tracing.enable(provider)
    yield exporter
    tracing.disable()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


@pytest.mark.django_db
def test_a_request_trace_goes_on_into_its_job(
    redis_ns: RedisNamespace, traced: InMemorySpanExporter, client: Client
) -> None:
    task_id = client.get("/signup").content.decode()
    assert [o.state for o in run_burst()] == ["completed"]

    spans = traced.get_finished_spans()
    request = by_name(spans, "GET /signup")
    enqueue = by_name(spans, f"enqueue {Noop.name}")
    run = by_name(spans, f"run {Noop.name}")
    assert request.context is not None
    assert enqueue.context is not None
    assert run.context
    assert run.context.trace_id == request.context.trace_id
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.context.span_id
    assert run.parent is not None
    assert run.parent.span_id == enqueue.context.span_id
    assert run.kind is trace.SpanKind.CONSUMER
    assert run.attributes is not None
    assert run.attributes["django_jobs.task_id"] == task_id


@pytest.mark.django_db
def test_a_failed_run_is_an_error_span(
    redis_ns: RedisNamespace, traced: InMemorySpanExporter, tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("CHAOS_LOG_DIR", str(tmp_path))
    Chaos.enqueue(ChaosWork(1, fail="raise"), max_attempts=1)
    assert [o.state for o in run_burst()] == ["dead"]
    run = by_name(traced.get_finished_spans(), f"run {Chaos.name}")
    assert run.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in run.events] == ["exception"]


def test_untraced_records_stay_version_1_and_traced_ones_carry_the_context() -> None:
    """Both readable by the release before (message.WRITTEN_VERSION); version 3 read as well."""
    plain = Message("a", "j", "default", {}, 1, 10.0, 0.0)
    assert json.loads(encode(plain))["v"] == 1
    assert "trace" not in json.loads(encode(plain))
    assert decode(encode(plain), "a", "default") == plain
    carried = Message("a", "j", "default", {}, 1, 10.0, 0.0, trace={"traceparent": "00-ab-cd-01"})
    assert json.loads(encode(carried))["v"] == 2
    assert json.loads(encode(carried))["trace"] == {"traceparent": "00-ab-cd-01"}
    assert decode(encode(carried), "a", "default") == carried
    assert decode(encode(carried, version=3), "a", "default") == carried
    with pytest.raises(DecodeError, match="trace"):
        decode(encode(carried).replace('"00-ab-cd-01"', "5"), "a", "default")
    with pytest.raises(DecodeError, match="version 4"):
        decode(encode(plain).replace('"v":1', '"v":4'), "a", "default")


def test_enable_without_opentelemetry_says_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImproperlyConfigured, match=r"django-redis-jobs\[otel\]"):
        tracing.enable()
    assert tracing.tracer is None
