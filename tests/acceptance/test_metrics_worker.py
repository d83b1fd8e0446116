"""A real `runworker --metrics-port`: its endpoint, scraped after a known workload, sums what
every prefork child counted (prometheus_client's multiprocess mode), a crashed child's too."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testproject.probes.async_jobs import AsyncInterrupted, AsyncSleep
from testproject.probes.jobs import (
    Cancelable,
    Chaos,
    ChaosWork,
    CrashOnce,
    HoldGil,
    Noop,
    Number,
    Work,
)
from tests.acceptance.conftest import Worker, started
from tests.conftest import RedisNamespace, wait_until
from tests.metrics_scrape import counter, sample, samples, value


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
            sample(got, "django_jobs_completed_total", job=Noop.name, queue="default") == 20
            and sample(got, "django_jobs_completed_total", job=CrashOnce.name, queue="default") == 1
            and sample(got, "django_jobs_dead_total", job=Chaos.name, queue="default") == 2
            and sample(got, "django_jobs_dead_total", job=HoldGil.name, queue="default") == 1
        )

    wait_until(settled, timeout=30, why=worker.output)
    got = scrape(worker)
    q = {"queue": "default"}
    assert value(got, "django_jobs_failed_total", job=Chaos.name, **q) == 2
    assert counter(got, "django_jobs_failed_total", job=Noop.name, **q) == 0
    assert value(got, "django_jobs_failed_total", job=HoldGil.name, **q) == 1
    assert value(got, "django_jobs_crashed_total", job=CrashOnce.name, **q) == 1
    assert value(got, "django_jobs_run_seconds_count", job=Noop.name, **q) == 20
    assert value(got, "django_jobs_start_latency_seconds_count", job=Noop.name, **q) == 20
    assert value(got, "django_jobs_slots_total") == 2
    assert value(got, "django_jobs_slots_busy") == 0


def test_runworker_metrics_port__slots_busy_while_runs_go_on_and_cancels_counted(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a worker of two prefork children, both running a job that waits to be canceled (one
    # returns when it is, the other ignores it: its child is killed after CANCEL_GRACE)
    handles = Cancelable.enqueue_many([Work("return-a"), Work("ignore-b")])
    worker.start("--concurrency", "2", "--metrics-port", "0", CANCEL_GRACE=1)
    started(redis_ns, "return-a")
    started(redis_ns, "ignore-b")

    # Then the endpoint says both slots are busy
    got = wait_until(lambda: busy(worker, 2), timeout=10, why=worker.output)
    assert value(got, "django_jobs_slots_total") == 2

    # When both are canceled, both are counted canceled (not failed) and the slots are idle
    for handle in handles:
        handle.cancel()
    got = wait_until(lambda: counted(worker, "canceled", Cancelable.name, 2), timeout=20,
                     why=worker.output)  # fmt: skip
    # No failure counted: no sample at all (that failed_total is exported at all, and not 0 for
    # whatever is asked, is test_runworker_metrics_port_sums_its_children's)
    assert sample(got, "django_jobs_failed_total", job=Cancelable.name, queue="default") is None
    wait_until(lambda: busy(worker, 0), timeout=10, why=worker.output)


def test_runworker_metrics_port__an_async_child_counts_each_run_and_its_slots(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given one async child of 4 slots: 3 runs awaiting their cancel, 5 short ones beside them
    waiting = AsyncInterrupted.enqueue_many([Work(f"return-{i}") for i in range(3)])
    AsyncSleep.enqueue_many([Work(f"s{i}", seconds=0.05) for i in range(5)])
    worker.start("--concurrency", "1", "--async-concurrency", "4", "--metrics-port", "0")

    # Then the short runs are counted as each run is in a prefork child, and 3 of 4 slots busy
    got = wait_until(lambda: counted(worker, "completed", AsyncSleep.name, 5), timeout=20,
                     why=worker.output)  # fmt: skip
    q = {"job": AsyncSleep.name, "queue": "default"}
    assert value(got, "django_jobs_run_seconds_count", **q) == 5
    assert value(got, "django_jobs_start_latency_seconds_count", **q) == 5
    assert value(got, "django_jobs_slots_total") == 4
    wait_until(lambda: busy(worker, 3), timeout=10, why=worker.output)

    # When the 3 are canceled, each is counted canceled and its slot is idle again
    for handle in waiting:
        handle.cancel()
    wait_until(lambda: counted(worker, "canceled", AsyncInterrupted.name, 3), timeout=20,
               why=worker.output)  # fmt: skip
    wait_until(lambda: busy(worker, 0), timeout=10, why=worker.output)


def busy(worker: Worker, slots: int) -> Any:
    """The scrape, once django_jobs_slots_busy is slots (else None)."""
    got = scrape(worker) if "Metrics on" in worker.output() else {}
    return got if sample(got, "django_jobs_slots_busy") == slots else None


def counted(worker: Worker, outcome: str, job: str, runs: int) -> Any:
    """The scrape, once django_jobs_<outcome>_total of job on default is runs (else None)."""
    got = scrape(worker) if "Metrics on" in worker.output() else {}
    done = sample(got, f"django_jobs_{outcome}_total", job=job, queue="default")
    return got if done == runs else None
