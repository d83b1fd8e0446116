"""A Redis that evicts keys (a maxmemory-policy other than noeviction) can drop a task's record
and leave its id listed: such a task goes dead saying "record evicted" when a worker meets it,
wherever its id was (pending, scheduled, retry, running), instead of vanishing unreported; the
admin shows an id without a record as such; and a worker logs every eviction Redis reports."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_jobs import Job
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.testing import run_burst
from django_jobs.worker.janitor import Janitor
from django_jobs.worker.recoverer import Recoverer
from tests.conftest import RedisNamespace, RedisServer

pytestmark = pytest.mark.django_db

ran: list[int] = []


@dataclass(frozen=True)
class Item:
    n: int


class Work(Job[Item]):
    def run(self, payload: Item) -> None:
        ran.append(payload.n)


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def record(ns: RedisNamespace, task_id: str) -> str:
    return f"{ns.namespace}:{{default}}:t:{task_id}"


def evicted(ns: RedisNamespace, task_id: str) -> str | None:
    """The error of the task if it is dead, else None."""
    if ns.client.zscore(f"{ns.namespace}:{{default}}:dead", task_id) is None:
        return None
    error = ns.client.hget(record(ns, task_id), "error")
    return error.decode() if error else ""


def test_evicted__a_pending_task_without_its_record_goes_dead_saying_so(
    redis_ns: RedisNamespace,
) -> None:
    gone, kept = Work.enqueue(Item(1)), Work.enqueue(Item(2))
    redis_ns.client.delete(record(redis_ns, gone.id))  # what an eviction does

    run_burst()

    assert ran == [2]
    assert (evicted(redis_ns, gone.id) or "").startswith("record evicted:")
    assert evicted(redis_ns, kept.id) is None


@pytest.mark.parametrize("state", ["scheduled", "retry"])
def test_evicted__a_waiting_task_without_its_record_goes_dead_when_due(
    redis_ns: RedisNamespace, state: str
) -> None:
    task_id = "e" * 32
    redis_ns.client.zadd(f"{redis_ns.namespace}:{{default}}:{state}", {task_id: 1})  # due

    run_burst()

    assert (evicted(redis_ns, task_id) or "").startswith("record evicted:")


def test_evicted__a_running_task_without_its_record_goes_dead_when_its_lease_ends(
    redis_ns: RedisNamespace,
) -> None:
    task = Work.enqueue(Item(1))
    broker = get_broker()
    (delivery,) = broker.dequeue_many(["default"], 1)
    redis_ns.client.delete(record(redis_ns, task.id))
    redis_ns.client.zadd(f"{redis_ns.namespace}:{{default}}:lease", {task.id: 1})  # expired

    Recoverer(broker, ["default"]).tick()
    run_burst()

    assert delivery.id == task.id
    assert (evicted(redis_ns, task.id) or "").startswith("record evicted:")


def test_evicted__a_running_task_whose_lease_set_went_is_recovered(
    redis_ns: RedisNamespace,
) -> None:
    task = Work.enqueue(Item(1))
    broker = get_broker()
    broker.dequeue_many(["default"], 1)  # its worker then died, and the lease set was evicted
    redis_ns.client.delete(f"{redis_ns.namespace}:{{default}}:lease")

    Recoverer(broker, ["default"]).tick()
    run_burst()

    assert ran == [1]
    assert redis_ns.client.hget(record(redis_ns, task.id), "crashes") == b"1"


def test_evicted__the_admin_shows_an_id_without_a_record_as_such(
    redis_ns: RedisNamespace, admin_client: Client
) -> None:
    task = Work.enqueue(Item(1))
    redis_ns.client.delete(record(redis_ns, task.id))

    (info,) = get_inspector().tasks("default", "pending").items
    page = admin_client.get(reverse("admin:django_jobs_task_changelist"), {"state": "pending"})

    assert info.error == info.decode_error
    assert (info.error or "").startswith("no record: only its id is left")
    assert '">(no record)</span>' in page.content.decode()


def test_evicted__a_worker_logs_the_keys_redis_evicted(
    private_redis: RedisServer, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t"}
    client = private_redis.client()
    ticks = iter(range(0, 10**6, 1000))
    janitor = Janitor(get_broker(), ["default"], clock=lambda: next(ticks))  # Redis part each tick
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 200_000)
    for n in range(400):
        client.set(f"t:filler:{n}", "x" * 2000)
    count = int(client.info("stats")["evicted_keys"])
    client.config_set("maxmemory", 0)

    with caplog.at_level(logging.ERROR, "django_jobs.worker.janitor"):
        janitor.tick()  # the first look: what Redis evicted before this worker started, too
        janitor.tick()  # nothing evicted since: nothing more said
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 100_000)
        for n in range(400, 800):
            client.set(f"t:filler:{n}", "x" * 2000)
        more = int(client.info("stats")["evicted_keys"]) - count
        client.config_set("maxmemory", 0)
        janitor.tick()

    assert count > 0
    assert more > 0
    first, second = (r.getMessage() for r in caplog.records)
    assert f"Redis evicted {count} key(s) since it started (maxmemory-policy allkeys-lru)" in first
    assert f"Redis evicted {more} key(s) since this worker last looked" in second
