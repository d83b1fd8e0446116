"""Where the worker reports what it decided: a no-op unless a recorder is installed.

The worker tests `hook.recorder is not None` before each call, so with metrics off a run
costs one global read; this module imports nothing of prometheus_client.
"""

from __future__ import annotations

from typing import Protocol

from django_jobs.broker.protocol import Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable


class Recorder(Protocol):
    """What the worker reports (django_jobs.metrics.worker.PrometheusRecorder)."""

    def started(self, job: str, queue: str, enqueued_at: float | None) -> None:
        """A run begins now: the task's enqueue-to-start latency."""

    def finished(self, verdict: Verdict, written: bool) -> None:
        """A run's outcome was written (or not: then nothing is counted)."""

    def crashed(self, job: str, queue: str) -> None:
        """A worker child died while running a task of job ("" if unknown) in queue."""


#: Installed by `runworker --metrics-port` before the children are forked; None: metrics off.
recorder: Recorder | None = None


def job_of(broker: RedisBroker, delivery: Delivery) -> str:
    """The job type of a task the supervisor holds only by id (one read, for a crash, with
    metrics on); "" if its record is gone or cannot be read."""
    try:
        rows = broker.task_rows(delivery.queue, [delivery.id], "")
    except BrokerUnavailable:
        return ""
    return (rows[0].job or "") if rows else ""
