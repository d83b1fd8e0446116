"""The worker's metrics: counters and histograms in prometheus_client's multiprocess mode.

`runworker --metrics-port N` calls `start` in the supervisor before it forks its children:
it makes a directory of this worker's own, points prometheus_client's multiprocess values at
it and installs the recorder in `hook`. Each child (forked, then recycled) writes its figures
to its own files there; the supervisor's HTTP server sums every file at each scrape, so the
counters of a child that exited stay counted. Slots busy/total are read from the supervisor's
slot table at scrape time.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from django_jobs.broker.protocol import Action, Verdict
from django_jobs.keys import logical_queue
from django_jobs.metrics import hook

INSTALL_HINT = (
    "Metrics need prometheus_client: install the extra, pip install 'django-redis-jobs"
    "[prometheus]' (or pip install prometheus_client), or start the worker without "
    "--metrics-port."
)

#: Run times and latencies, in seconds: from a millisecond to ten minutes.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600)


def require() -> Any:
    """Import prometheus_client, or raise ImproperlyConfigured saying to install the extra."""
    try:
        import prometheus_client
    except ImportError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(INSTALL_HINT) from exc
    return prometheus_client


class PrometheusRecorder:
    """Counts what the worker decides (see docs/metrics.rst for each metric)."""

    def __init__(self) -> None:
        p = require()
        labels = ("job", "queue")

        def counter(name: str, doc: str) -> Any:
            return p.Counter(name, doc, labels, registry=None)

        self.completed = counter("django_jobs_completed", "Runs that completed.")
        self.failed = counter("django_jobs_failed", "Runs whose handler raised (or timed out).")
        self.retried = counter("django_jobs_retried", "Tasks put back to run later (retry).")
        self.dead = counter("django_jobs_dead", "Tasks that went to the dead state.")
        self.canceled = counter("django_jobs_canceled", "Runs that stopped for their cancel.")
        self.crashes = counter("django_jobs_crashed", "Worker children that died under a task.")
        self.run_seconds = p.Histogram(
            "django_jobs_run_seconds", "Run time of the handler, per outcome written.", labels,
            buckets=BUCKETS, registry=None,
        )  # fmt: skip
        self.latency = p.Histogram(
            "django_jobs_start_latency_seconds", "From the enqueue to the run's start.", labels,
            buckets=BUCKETS, registry=None,
        )  # fmt: skip

    def started(self, job: str, queue: str, enqueued_at: float | None) -> None:
        if enqueued_at is not None:
            self.latency.labels(job, queue).observe(max(0.0, time.time() - enqueued_at))

    def finished(self, verdict: Verdict, written: bool) -> None:
        if not written:
            return
        v, queue = verdict, logical_queue(verdict.queue)  # a queue of ours, not its shard
        if v.attempt:  # a run happened (not a corrupt record, nor an unknown job's bounce)
            # First: a scrape that sees a run's outcome counted sees its duration too.
            self.run_seconds.labels(v.job, queue).observe(v.duration)
        if v.action is Action.ACK:
            self.completed.labels(v.job, queue).inc()
        elif v.action is Action.RETRY:
            self.retried.labels(v.job, queue).inc()
        elif v.action is Action.CANCEL:
            self.canceled.labels(v.job, queue).inc()
        else:
            self.dead.labels(v.job, queue).inc()
        if v.action is not Action.ACK and v.spend:
            self.failed.labels(v.job, queue).inc()

    def crashed(self, job: str, queue: str) -> None:
        self.crashes.labels(job, queue).inc()


class SlotsCollector:
    """django_jobs_slots_busy and _total, read from the supervisor at each scrape."""

    def __init__(self, busy: Callable[[], int], total: int) -> None:
        self.busy = busy
        self.total = total

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("django_jobs_slots_busy", "Children running a task now.",
                                value=self.busy())  # fmt: skip
        yield GaugeMetricFamily("django_jobs_slots_total", "Children of this worker.",
                                value=self.total)  # fmt: skip


#: Bytes of a multiprocess file's header (how much of it is used), there once the file is grown.
HEADER = 8


class ChildrenCollector:
    """The children's figures: prometheus_client's multiprocess collector, minus the files a
    child has only just created. MmapedDict opens (creates) its file empty and only then grows
    it: reading one in between raised struct.error, a 500 for the scrape. It is read next time."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Any:
        from prometheus_client.multiprocess import MultiProcessCollector

        files = []
        for name in glob.glob(os.path.join(self.directory, "*.db")):
            with contextlib.suppress(FileNotFoundError):  # a file gone since the glob
                if os.path.getsize(name) >= HEADER:
                    files.append(name)
        return MultiProcessCollector.merge(files, accumulate=True)  # type: ignore[no-untyped-call]


class WorkerMetrics:
    """One worker's metrics directory and HTTP endpoint (`start` makes it)."""

    def __init__(self, directory: str, server: Any) -> None:
        self.directory = directory
        self.server = server

    @property
    def port(self) -> int:
        port: int = self.server.server_port
        return port

    def stop(self) -> None:
        """Stop serving, uninstall the recorder and delete the directory."""
        self.server.shutdown()
        self.server.server_close()
        hook.recorder = None
        shutil.rmtree(self.directory, ignore_errors=True)


def start(port: int, busy: Callable[[], int], total: int, addr: str = "0.0.0.0") -> WorkerMetrics:
    """Serve this worker's metrics on port (0: any free port) and install the recorder.

    Call it in the supervisor before forking children. Raises ImproperlyConfigured without
    prometheus_client.
    """
    p = require()
    from prometheus_client import values

    directory = tempfile.mkdtemp(prefix="django-jobs-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    # Chosen when prometheus_client was imported: maybe before the variable was set.
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    registry = p.CollectorRegistry()
    registry.register(ChildrenCollector(directory))
    registry.register(SlotsCollector(busy, total))
    hook.recorder = PrometheusRecorder()
    server, _thread = p.start_http_server(port, addr=addr, registry=registry)
    return WorkerMetrics(directory, server)
