"""Parked tasks counted (issue 21): a task over its job type's concurrency_limit waits in
`parked:<job>`, its record pending; the Inspector's queues, the admin's Queues page, the API
overview, `manage.py jobs stats` and the metrics' depth per state show it as `parked`, and not
in `pending` (it is not in the pending list)."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import include, path, reverse

from django_jobs import Job
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.worker.processor import Processor
from tests.conftest import RedisNamespace
from tests.metrics_scrape import samples, value

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/admin/jobs", include("django_jobs.api.urls")),
    path("jobs/", include("django_jobs.metrics.urls")),
]

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Item:
    n: int


class Solo(Job[Item]):
    name = "limits_parked.Solo"
    concurrency_limit = 1

    def run(self, payload: Item) -> None:
        pass


@pytest.fixture
def one_parked(redis_ns: RedisNamespace, settings: Any) -> Client:
    """Two Solo tasks in default: one dequeued (running), one parked; a superuser's client."""
    settings.ROOT_URLCONF = __name__
    broker = get_broker()
    assert isinstance(broker, RedisBroker)
    Processor(broker)  # takes the registry's limits, as every worker does
    first, second = Solo.enqueue(Item(1)), Solo.enqueue(Item(2))
    assert [d.id for d in broker.dequeue_many(["default"], 20)] == [first.id]
    parked = redis_ns.client.lrange(broker.keys("default").parked(Solo.name), 0, -1)
    assert [x.decode() if isinstance(x, bytes) else x for x in parked] == [second.id]
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", None))
    return client


def test_inspector__counts_the_parked_task_apart_from_pending(one_parked: Client) -> None:
    default = next(q for q in get_inspector().queues() if q.name == "default")

    assert (default.pending, default.parked, default.active) == (0, 1, 1)


def test_api_overview__has_parked_beside_pending(one_parked: Client) -> None:
    response = one_parked.get("/api/v1/admin/jobs")

    assert response.status_code == 200, response.content
    default = next(q for q in response.json()["queues"] if q["name"] == "default")
    assert (default["pending"], default["parked"], default["active"]) == (0, 1, 1)


def test_admin_queues__shows_parked_beside_pending(one_parked: Client) -> None:
    response = one_parked.get(reverse("admin:django_jobs_queue_changelist"))

    assert response.status_code == 200
    body = response.content.decode()
    assert '<span>Pending</span></div></th>\n            <th scope="col" class="jobs-number">' \
        '<div class="text"><span>Parked</span>' in body  # fmt: skip
    row = re.search(r'<tr class="jobs-queue-default">(.*?)</tr>', body, re.DOTALL)
    assert row is not None
    cells = dict(re.findall(r'field-(\w+)" data-label="[^"]*">(?:<a [^>]*>)?(\d+)', row[1]))
    assert (cells["pending"], cells["parked"], cells["active"]) == ("0", "1", "1")


def test_cli_stats__a_parked_column_and_json_field(one_parked: Client) -> None:
    out = io.StringIO()
    call_command("jobs", "stats", stdout=out)
    as_json = io.StringIO()
    call_command("jobs", "stats", "--json", stdout=as_json)

    lines = out.getvalue().splitlines()
    assert lines[0].split()[:5] == ["QUEUE", "PAUSED", "SCHEDULED", "PENDING", "PARKED"]
    default = next(line.split() for line in lines if line.startswith("default "))
    assert default[3:6] == ["0", "1", "1"]  # pending, parked, active
    queue = next(q for q in json.loads(as_json.getvalue())["queues"] if q["name"] == "default")
    assert (queue["pending"], queue["parked"], queue["active"]) == (0, 1, 1)


def test_metrics__queue_depth_has_a_parked_state(one_parked: Client) -> None:
    response = one_parked.get("/jobs/metrics")

    assert response.status_code == 200, response.content
    got = samples(response.content.decode())
    q = {"queue": "default"}
    assert value(got, "django_jobs_queue_tasks", state="pending", **q) == 0
    assert value(got, "django_jobs_queue_tasks", state="active", **q) == 1
    assert ("django_jobs_queue_tasks", frozenset({**q, "state": "parked"}.items())) in got
    assert value(got, "django_jobs_queue_tasks", state="parked", **q) == 1
