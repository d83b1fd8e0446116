"""A real `runworker --metrics-port`: its endpoint, scraped after a known workload, sums what
every prefork child counted (prometheus_client's multiprocess mode), a crashed child's too."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from testproject.probes.jobs import Chaos, ChaosWork, CrashOnce, HoldGil, Noop, Number, Work
from tests.acceptance.conftest import Worker
from tests.conftest import RedisNamespace, wait_until
from tests.metrics_scrape import samples, value


def scrape(worker: Worker) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = re.search(r"Metrics on http://0\.0\.0\.0:(\d+)/metrics", worker.output())
    assert found, worker.output()
    with urllib.request.urlopen(f"http://127.0.0.1:{found[1]}/metrics", timeout=5) as reply:
        return samples(reply.read().decode())


def test_runworker_metrics_port_sums_its_children(
    worker: Worker, redis_ns: RedisNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOS_LOG_DIR", str(tmp_path))  # the worker inherits it
    Noop.enqueue_many([Number(i) for i in range(20)])
    Chaos.enqueue(ChaosWork(1, fail="raise"), max_attempts=1)
    Chaos.enqueue(ChaosWork(2, fail="raise"), max_attempts=1)
    CrashOnce.enqueue(Work("c"))
    HoldGil.enqueue(Work("gil"), timeout=1, max_attempts=1)  # its child killed after the grace

    worker.start("--concurrency", "2", "--metrics-port", "0")

    def settled() -> bool:
        got = scrape(worker) if "Metrics on" in worker.output() else {}
        return (
            value(got, "django_jobs_completed_total", job=Noop.name, queue="default") == 20
            and value(got, "django_jobs_completed_total", job=CrashOnce.name, queue="default") == 1
            and value(got, "django_jobs_dead_total", job=Chaos.name, queue="default") == 2
            and value(got, "django_jobs_dead_total", job=HoldGil.name, queue="default") == 1
        )

    wait_until(settled, timeout=30, why=worker.output)
    got = scrape(worker)
    q = {"queue": "default"}
    assert value(got, "django_jobs_failed_total", job=Chaos.name, **q) == 2
    assert value(got, "django_jobs_failed_total", job=Noop.name, **q) == 0
    assert value(got, "django_jobs_failed_total", job=HoldGil.name, **q) == 1
    assert value(got, "django_jobs_crashed_total", job=CrashOnce.name, **q) == 1
    assert value(got, "django_jobs_run_seconds_count", job=Noop.name, **q) == 20
    assert value(got, "django_jobs_start_latency_seconds_count", job=Noop.name, **q) == 20
    assert value(got, "django_jobs_slots_total") == 2
    assert value(got, "django_jobs_slots_busy") == 0
