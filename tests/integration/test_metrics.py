"""Metrics (docs/metrics.rst): the worker's recorder after a known in-process workload, and the
queue-wide view, scraped and parsed from Prometheus' text format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import include, path
from prometheus_client import CollectorRegistry, generate_latest

import django_jobs
from django_jobs.client import get_broker
from django_jobs.metrics import hook
from django_jobs.metrics.worker import PrometheusRecorder
from django_jobs.testing import run_burst
from testproject.probes.jobs import Chaos, ChaosWork, Noop, Number
from tests.conftest import RedisNamespace, RedisServer
from tests.metrics_scrape import counter, samples, value

urlpatterns = [path("jobs/", include("django_jobs.metrics.urls"))]

pytestmark = pytest.mark.django_db


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> tuple[PrometheusRecorder, Any]:
    rec = PrometheusRecorder()
    registry = CollectorRegistry()
    for metric in vars(rec).values():
        registry.register(metric)
    monkeypatch.setattr(hook, "recorder", rec)
    return rec, registry


def test_recorder_counts_a_known_workload(
    redis_ns: RedisNamespace, recorder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOS_LOG_DIR", str(tmp_path))
    _rec, registry = recorder
    for i in range(4):
        Noop.enqueue(Number(i))
    Chaos.enqueue(ChaosWork(1, fail="raise"), max_attempts=1)  # failed, dead
    Chaos.enqueue(ChaosWork(2, fail="raise"), max_attempts=3)  # failed, retried (not due yet)

    run_burst()

    got = samples(generate_latest(registry).decode())
    q = {"queue": "default"}
    assert value(got, "django_jobs_completed_total", job=Noop.name, **q) == 4
    assert value(got, "django_jobs_failed_total", job=Chaos.name, **q) == 2
    assert value(got, "django_jobs_dead_total", job=Chaos.name, **q) == 1
    assert value(got, "django_jobs_retried_total", job=Chaos.name, **q) == 1
    assert counter(got, "django_jobs_failed_total", job=Noop.name, **q) == 0
    assert value(got, "django_jobs_run_seconds_count", job=Noop.name, **q) == 4
    assert value(got, "django_jobs_run_seconds_count", job=Chaos.name, **q) == 2
    assert value(got, "django_jobs_start_latency_seconds_count", job=Noop.name, **q) == 4
    latency = value(got, "django_jobs_start_latency_seconds_sum", job=Noop.name, **q)
    assert 0 <= latency < 60


def test_no_recorder_counts_nothing(redis_ns: RedisNamespace) -> None:
    assert hook.recorder is None  # metrics off unless runworker --metrics-port installs one
    Noop.enqueue(Number(1))
    assert [o.state for o in run_burst()] == ["completed"]


@pytest.fixture
def metrics_urls(settings: Any) -> None:
    settings.ROOT_URLCONF = __name__


def test_view_serves_the_depth_of_every_queue_per_state(
    redis_ns: RedisNamespace, metrics_urls: None, client: Client
) -> None:
    for i in range(3):
        Noop.enqueue(Number(i))
    Noop.enqueue(Number(9), delay=3600)
    run_burst(max_tasks=1)
    staff = User.objects.create_user("ops", password="x", is_staff=True)
    client.force_login(staff)

    response = client.get("/jobs/metrics")

    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    got = samples(response.content.decode())
    q = {"queue": "default"}
    assert value(got, "django_jobs_queue_tasks", state="pending", **q) == 2
    assert value(got, "django_jobs_queue_tasks", state="scheduled", **q) == 1
    assert value(got, "django_jobs_queue_tasks", state="completed", **q) == 1
    assert value(got, "django_jobs_queue_tasks", state="dead", **q) == 0
    assert ("django_jobs_queue_paused", frozenset(q.items())) in got


def test_view_refuses_anyone_but_staff_or_the_token(
    redis_ns: RedisNamespace, metrics_urls: None, client: Client, settings: Any
) -> None:
    response = client.get("/jobs/metrics")
    assert response.status_code == 403
    assert b"JOBS_METRICS_TOKEN" in response.content
    client.force_login(User.objects.create_user("plain", password="x"))
    assert client.get("/jobs/metrics").status_code == 403

    settings.JOBS_METRICS_TOKEN = "s3cret"
    assert client.get("/jobs/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    response = client.get("/jobs/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200
    assert b"django_jobs_queue_tasks" in response.content


def test_view_without_redis_is_a_503_saying_why(
    metrics_urls: None, client: Client, settings: Any
) -> None:
    settings.JOBS = {**getattr(settings, "JOBS", {}), "REDIS_URL": None}
    client.force_login(User.objects.create_user("ops", password="x", is_staff=True))
    response = client.get("/jobs/metrics")
    assert response.status_code == 503
    assert b"REDIS_URL" in response.content


def test_view_serves_retry_active_and_canceled_depths(
    redis_ns: RedisNamespace, metrics_urls: None, client: Client, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("CHAOS_LOG_DIR", str(tmp_path))
    Chaos.enqueue(ChaosWork(1, fail="raise"), max_attempts=3)  # failed once: retry, not due yet
    run_burst()
    django_jobs.cancel(Noop.enqueue(Number(1)).id)  # canceled
    Noop.enqueue(Number(2), queue="low")
    assert get_broker().dequeue(["low"]) is not None  # running: active
    client.force_login(User.objects.create_user("ops", password="x", is_staff=True))

    got = samples(client.get("/jobs/metrics").content.decode())

    def depth(queue: str, state: str) -> float:
        return value(got, "django_jobs_queue_tasks", queue=queue, state=state)

    assert (depth("default", "retry"), depth("default", "canceled")) == (1, 1)
    assert (depth("default", "pending"), depth("default", "active")) == (0, 0)
    assert (depth("low", "active"), depth("low", "pending")) == (1, 0)
    assert value(got, "django_jobs_queue_paused", queue="low") == 0


def test_view_reads_counts_only_the_same_commands_for_10_tasks_or_200(
    private_redis: RedisServer, settings: Any, metrics_urls: None, client: Client
) -> None:
    """No scan of keys: a scrape costs Redis a fixed set of commands (those the scripts call
    included), whatever the number of tasks."""
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url, "NAMESPACE": "scrape"}
    redis = private_redis.client()
    client.force_login(User.objects.create_user("ops", password="x", is_staff=True))

    def scrape_commands(tasks: int) -> dict[str, int]:
        Noop.enqueue_many([Number(i) for i in range(tasks)])
        Noop.enqueue_many([Number(i) for i in range(tasks)], delay=3600)
        before = redis.info("commandstats")
        assert client.get("/jobs/metrics").status_code == 200
        after = redis.info("commandstats")
        return {
            name: stats["calls"] - before.get(name, {"calls": 0})["calls"]
            for name, stats in after.items()
            if name != "cmdstat_info" and stats["calls"] != before.get(name, {"calls": 0})["calls"]
        }

    scrape_commands(1)  # the connection made, any script loaded
    few, many = scrape_commands(10), scrape_commands(200)

    assert few == many
    assert not {"cmdstat_scan", "cmdstat_keys", "cmdstat_lrange", "cmdstat_zrange"} & set(many)
