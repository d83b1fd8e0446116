"""A task record written by an earlier release is read by this one: the admin shows it, the API
serves it, and the worker's processor runs it (run_burst, the code path of a worker's child; a real
`runworker` in tests/acceptance/test_upgrade_worker.py).

tests/fixtures/task_records_v1.json holds two records as release 0.1 (record version 1,
message.VERSION) wrote them: the raw hash fields, `msg` being the encoded message, one pending
as enqueue leaves it and one dead as a worker leaves it after a failure. task_records_v3.json
holds the same two as version 3 writes them (no id or queue in the message, no counter nothing
counted, no fetch receipt). A fixture is never regenerated: when the record format changes (a
new VERSION, a new or renamed hash field), these tests fail until the new release reads the old
records too; add a fixture of the new format beside these then. Their job is
testproject.probes.jobs.Greet ("upgrades.Greet").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs.client import get_broker
from django_jobs.keys import State
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent.parent / "fixtures"
FIXTURE = FIXTURES / "task_records_v1.json"
#: Every record format a release wrote: each is read by this one.
VERSIONS = {1: FIXTURE, 3: FIXTURES / "task_records_v3.json"}
API = "/api/v1/admin/jobs"


@pytest.fixture(params=sorted(VERSIONS), ids=lambda v: f"v{v}")
def old(request: pytest.FixtureRequest, redis_ns: RedisNamespace) -> dict[str, Any]:
    return write_old(redis_ns, VERSIONS[request.param])


def write_old(redis_ns: RedisNamespace, fixture: Path = FIXTURE) -> dict[str, Any]:
    """The fixture's records written into this test's namespace as an old release left them."""
    records: dict[str, Any] = json.loads(fixture.read_text())["records"]
    k = get_broker().keys("default")
    for record in records.values():
        redis_ns.client.hset(k.task(record["id"]), mapping=record["fields"])
    redis_ns.client.lpush(k.pending, records["pending"]["id"])
    dead = records["dead"]
    redis_ns.client.zadd(k.dead, {dead["id"]: float(dead["fields"]["died_at"])})
    return records


def greeted(redis_ns: RedisNamespace) -> list[str]:
    """The runs of the fixture's job (testproject.probes.jobs.Greet): "to:times" each."""
    return sorted(
        g.decode() for g in redis_ns.client.lrange(f"{redis_ns.namespace}:probe:greeted", 0, -1)
    )


def test_fixture__is_the_record_format_of_version_1() -> None:
    data = json.loads(FIXTURE.read_text())
    pending = data["records"]["pending"]["fields"]

    assert data["version"] == 1
    assert json.loads(pending["msg"])["v"] == 1
    assert set(pending) == {"attempts", "crashes", "enqueued_at", "epoch", "msg", "state"}


def test_fixture__is_the_record_format_of_version_3() -> None:
    data = json.loads(VERSIONS[3].read_text())
    pending, dead = data["records"]["pending"]["fields"], data["records"]["dead"]["fields"]

    assert data["version"] == 3
    assert json.loads(pending["msg"])["v"] == 3
    assert set(json.loads(pending["msg"])) & {"id", "queue"} == set()
    assert set(pending) == {"enqueued_at", "msg", "state"}
    assert set(dead) & {"receipt", "crashes"} == set()


def test_upgrade__the_admin_shows_old_records(old: dict[str, Any]) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root"))
    pending, dead = old["pending"]["id"], old["dead"]["id"]

    listed = client.get(reverse("admin:django_jobs_task_changelist"), {"state": "dead"})
    dead_page = client.get(reverse("admin:django_jobs_task_change", args=["default", dead]))
    pending_page = client.get(reverse("admin:django_jobs_task_change", args=["default", pending]))

    assert dead in listed.content.decode()
    body = dead_page.content.decode()
    assert "upgrades.Greet" in body
    assert "ada@example.com" in body
    assert "greet:ada" in body
    assert "RuntimeError: cannot greet ada@example.com" in body
    assert "cannot be decoded" not in body
    assert "bob@example.com" in pending_page.content.decode()


def test_upgrade__the_api_serves_old_records_and_retries_them(old: dict[str, Any]) -> None:
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("root"))
    dead = old["dead"]["id"]

    task = api.get(f"{API}/{dead}").json()
    failed = api.get(f"{API}/failed").json()
    retried = api.post(f"{API}/{dead}/retry")

    assert task["job"] == "upgrades.Greet"
    assert task["payload"] == {"to": "ada@example.com", "times": 2}
    assert (task["state"], task["attempts"], task["max_attempts"]) == ("dead", 1, 1)
    assert task["idempotency_key"] == "greet:ada"
    assert task["decode_error"] is None
    assert "RuntimeError: cannot greet" in task["traceback"]
    assert [t["id"] for t in failed["results"]] == [dead]
    assert retried.status_code == 200
    assert retried.json()["state"] == State.PENDING


def test_upgrade__a_worker_runs_old_records(old: dict[str, Any], redis_ns: RedisNamespace) -> None:
    api = APIClient()
    api.force_authenticate(User.objects.create_superuser("root"))
    assert api.post(f"{API}/{old['dead']['id']}/retry").status_code == 200

    outcomes = run_burst(["default"])

    assert len(outcomes) == 2
    assert greeted(redis_ns) == ["ada@example.com:2", "bob@example.com:1"]
    for record in old.values():
        assert get_broker().task_state("default", record["id"]) in (State.COMPLETED, None)
