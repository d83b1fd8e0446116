"""OpenTelemetry spans for enqueue and run (the `otel` extra), the trace carried in the task.

Off until `enable()` (call it in an AppConfig.ready of the project, so that both the web
processes and the workers trace): then each enqueue opens a span "enqueue <job>", the task
record carries its context (`Message.trace`, W3C traceparent/tracestate), and each run opens a
span "run <job>" continuing it, so a request's trace goes on into its jobs. Spans go to
whatever TracerProvider the project set up (opentelemetry-sdk and an exporter). With tracing
off, enqueue and run pay one global read. docs/metrics.rst.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INSTALL_HINT = (
    "Tracing needs opentelemetry-api: install the extra, pip install 'django-redis-jobs[otel]' "
    "(and opentelemetry-sdk with an exporter), or do not call django_jobs.tracing.enable()."
)

#: The tracer when enabled (opentelemetry's, following the global TracerProvider); None: off.
tracer: Any = None


def enable(tracer_provider: Any = None) -> None:
    """Trace enqueues and runs from now on, to tracer_provider (default: the global one);
    ImproperlyConfigured without opentelemetry-api."""
    global tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(INSTALL_HINT) from exc
    tracer = trace.get_tracer("django_jobs", tracer_provider=tracer_provider)


def disable() -> None:
    """Stop tracing (tasks already enqueued keep their context)."""
    global tracer
    tracer = None


@contextmanager
def enqueuing(job: str, count: int) -> Iterator[None]:
    """The span of one enqueue call, current while its tasks are built (their `carrier`)."""
    with tracer.start_as_current_span(
        f"enqueue {job}", kind=_kind("PRODUCER"),
        attributes={"django_jobs.job": job, "django_jobs.count": count},
    ):  # fmt: skip
        yield


def carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers for the task record (None if there is none)."""
    from opentelemetry import propagate

    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers or None


@contextmanager
def running(job: str, task_id: str, queue: str, attempt: int,
            trace: dict[str, str] | None) -> Iterator[None]:  # fmt: skip
    """The span of one run, a child of the enqueue's context the task carries."""
    from opentelemetry import propagate

    parent = propagate.extract(trace) if trace else None
    with tracer.start_as_current_span(
        f"run {job}", context=parent, kind=_kind("CONSUMER"),
        attributes={"django_jobs.job": job, "django_jobs.task_id": task_id,
                    "django_jobs.queue": queue, "django_jobs.attempt": attempt},
    ):  # fmt: skip
        yield


def _kind(name: str) -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind[name]
