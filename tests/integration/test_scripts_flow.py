"""Broker scripts atomic under failure, continued (issue 12, item 3): dequeue serves the good
queues past a broken one, maxmemory with noeviction refuses every write whole, and the worker's
own loop runs each task once whatever a statistics key holds.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from django_jobs import BrokerRefused, BrokerUnavailable
from django_jobs.broker.redis import COUNTER_TTL, RedisBroker
from django_jobs.client import get_broker
from django_jobs.keys import today
from tests.conftest import RedisNamespace, RedisServer
from tests.integration.test_broker import (
    ACTIVE_A,
    ACTIVE_A_SNAP,
    PENDING_B,
    held,
    put,
    request,
    task,
    verdict,
)
from tests.integration.test_scripts_atomic import foreign, key, refused
from tests.redis_state import q, redis_now, snapshot, t

# -- dequeue: a broken queue is skipped, the others flow ---------------------------------------


def test_dequeue__wrong_typed_lease_key_skips_its_queue_and_serves_the_next(
    redis_ns: RedisNamespace, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.JOBS = {**settings.JOBS, "QUEUES": ["critical", "default"]}
    broker = get_broker()
    broker.enqueue([request("c1", "critical"), request("c2", "critical")])
    broker.enqueue([request("d1"), request("d2")])
    lease = foreign(redis_ns, q("lease", "critical"))
    now = redis_now(redis_ns.client)  # both read against one clock: slow calls move nothing
    before = snapshot(redis_ns, now)

    with caplog.at_level(logging.WARNING, logger="django_jobs.broker"):
        first = broker.dequeue_many(["critical", "default"], 1)
        second = broker.dequeue_many(["critical", "default"], 1)

    assert [d.id for d in first + second] == ["d1", "d2"]
    after = snapshot(redis_ns, now)
    critical = {k: v for k, v in after.items() if "{critical}" in k}
    assert critical == {k: v for k, v in before.items() if "{critical}" in k}
    warnings = [r.getMessage() for r in caplog.records if lease in r.getMessage()]
    assert len(warnings) == 1, "one warning per key, not one per call"
    assert "is a string, not the zset" in warnings[0]
    assert "skipped" in warnings[0]


def test_dequeue__wrong_typed_active_key_skips_its_queue(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    broker.enqueue([request("a")])
    foreign(redis_ns, q("active"), "zset")
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)

    assert broker.dequeue_many(["default"], 5) == []
    assert snapshot(redis_ns, now) == before


def test_dequeue__record_that_is_not_a_hash_is_buried_as_dead(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    broker = get_broker()
    broker.enqueue([request("a"), request("b")])
    record = key(redis_ns, t("a"))
    redis_ns.client.delete(record)
    redis_ns.client.set(record, "garbage")

    with caplog.at_level(logging.WARNING, logger="django_jobs.broker"):
        fetched = broker.dequeue_many(["default"], 2)

    assert [d.id for d in fetched] == ["b"]
    snap = snapshot(redis_ns)
    assert snap[q("dead")] == ("zset", [("a", "now")])
    assert snap[q("active")] == ("list", ["b"])
    assert snap[q("lease")][1][0][0] == "b"
    dead = snap[t("a")][1]
    assert dead["state"] == "dead"
    assert "was a string, not a hash" in dead["error"]
    assert any(record in r.getMessage() for r in caplog.records)


def test_recover__record_that_is_not_a_hash_is_buried_as_dead(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("a", "active", -1, epoch=1))
    redis_ns.client.delete(key(redis_ns, t("a")))
    redis_ns.client.rpush(key(redis_ns, t("a")), "garbage")

    assert get_broker().recover("default") == [("a", "dead")]

    snap = snapshot(redis_ns)
    assert q("active") not in snap
    assert q("lease") not in snap
    assert snap[q("dead")] == ("zset", [("a", "now")])
    assert snap[t("a")][1]["state"] == "dead"


def test_dequeue__garbage_times_are_the_delivery_problem(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("a", "pending", enqueued_at=None))
    redis_ns.client.hset(key(redis_ns, t("a")), "enqueued_at", "abc")
    put(redis_ns, task("b", "pending", first_unknown_at=None))
    redis_ns.client.hset(key(redis_ns, t("b")), "first_unknown_at", "soon")

    fetched = get_broker().dequeue_many(["default"], 3)

    assert [(d.id, d.problem, d.enqueued_at is None) for d in fetched] == [
        ("a", "enqueued_at is not a number: 'abc'", True),
        ("b", "first_unknown_at is not a number: 'soon'", False),
    ]


def test_wait_and_fetch__wrong_typed_wake_key_backs_off_named_or_delivers(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    wake = foreign(redis_ns, q("wake"), "hash")

    error = refused(lambda: broker.wait_and_fetch(["default"], 5))
    assert error.key == wake

    broker.enqueue([request("a")])
    assert [d.id for d in broker.wait_and_fetch(["default"], 5)] == ["a"]


# -- maxmemory with noeviction: refused whole, named ------------------------------------------


@pytest.fixture
def full_redis(private_redis: RedisServer, settings: Any) -> tuple[RedisNamespace, RedisBroker]:
    """A private Redis with a task active (a), one pending (b) and one in another queue, then
    out of memory: maxmemory below what it uses, policy noeviction."""
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t", "QUEUES": ["default", "low"]}
    ns = RedisNamespace(private_redis.url, "t", private_redis.client())
    put(ns, ACTIVE_A)
    put(ns, PENDING_B)
    put(ns, task("c", "pending", queue="low"))
    broker = get_broker()
    client = private_redis.client()
    for script in broker.scripts.values():
        client.script_load(script.script)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("t:probe", "1")
    return ns, broker


@pytest.mark.parametrize(
    "act",
    [
        pytest.param(lambda b: b.enqueue([request("n")]), id="enqueue"),
        pytest.param(lambda b: b.enqueue([request("n"), request("m")]), id="enqueue_many"),
        pytest.param(lambda b: b.dequeue(["default", "low"]), id="dequeue"),
        pytest.param(lambda b: b.ack(held("a"), 3600), id="ack"),
        pytest.param(lambda b: b.retry(held("a"), 5, "E", ""), id="retry"),
        pytest.param(lambda b: b.requeue(held("a"), crash=True), id="requeue"),
        pytest.param(
            lambda b: b.settle([verdict("ack", retention=3600)], ["default"], 1), id="settle"
        ),
        pytest.param(lambda b: b.wait_and_fetch(["default"], 0.1), id="wait_and_fetch"),
    ],
)
def test_oom__every_write_refused_whole_with_the_named_error(
    full_redis: tuple[RedisNamespace, RedisBroker], act: Any
) -> None:
    ns, broker = full_redis
    now = redis_now(ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(ns, now)

    error = refused(lambda: act(broker))

    assert snapshot(ns, now) == before
    assert "is out of memory (maxmemory" in str(error)
    assert "free memory or raise maxmemory" in str(error)
    assert "nothing was" in str(error)


def test_oom__enqueue_says_nothing_was_enqueued(
    full_redis: tuple[RedisNamespace, RedisBroker],
) -> None:
    _ns, broker = full_redis

    error = refused(lambda: broker.enqueue([request("n")]))

    assert str(error).endswith("free memory or raise maxmemory; nothing was enqueued.")


def test_oom__leases_still_renewed_so_a_running_task_is_not_run_twice(
    full_redis: tuple[RedisNamespace, RedisBroker],
) -> None:
    ns, broker = full_redis

    assert broker.extend_leases("default", [("a", "1")]) == []

    assert snapshot(ns)[q("lease")] == ACTIVE_A_SNAP[q("lease")]


def test_oom__flows_again_once_memory_is_freed(
    full_redis: tuple[RedisNamespace, RedisBroker], private_redis: RedisServer
) -> None:
    ns, broker = full_redis
    refused(lambda: broker.ack(held("a"), 3600))
    private_redis.client().config_set("maxmemory", 0)

    written, fetched = broker.settle([verdict("ack", retention=3600)], ["default", "low"], 2)

    assert (written, [d.id for d in fetched]) == ([True], ["b", "c"])
    assert snapshot(ns)[t("a")][1]["state"] == "completed"
    assert snapshot(ns)[q("processed:<day>")] == ("string", "1", COUNTER_TTL)


def test_broker_refused__is_exported_and_a_broker_unavailable() -> None:
    import django_jobs
    from django_jobs import exceptions

    assert django_jobs.BrokerRefused is exceptions.BrokerRefused
    assert issubclass(BrokerRefused, BrokerUnavailable)
    assert "BrokerRefused" in django_jobs.__all__


# -- through the worker's own loop -------------------------------------------------------------


def test_run_burst__wrong_typed_day_counter_runs_each_task_once(
    redis_ns: RedisNamespace,
) -> None:
    # The issue: ack failed after LREM/ZREM, so every task ran 3 times and died "crashed its
    # worker 3 times".
    from django_jobs.testing import run_burst
    from tests.integration.test_broker import Note, NoteJob, noted

    noted.clear()  # a list of test_broker's, cleared by its own fixture only there

    foreign(redis_ns, q(f"processed:{today()}", NoteJob.queue), "hash")
    handles = [NoteJob.enqueue(Note(text)) for text in ("one", "two")]

    outcomes = run_burst()

    assert sorted(noted) == ["one", "two"]
    assert [o.state for o in outcomes] == ["completed", "completed"]
    assert [h.refresh() for h in handles] == ["completed", "completed"]


def test_run_burst__a_broken_queue_waits_while_the_others_flow(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    from django_jobs.testing import run_burst
    from tests.integration.test_broker import Note, NoteJob, noted

    noted.clear()  # a list of test_broker's, cleared by its own fixture only there

    settings.JOBS = {**settings.JOBS, "QUEUES": ["critical", "default"]}
    stuck = NoteJob.enqueue(Note("stuck"), queue="critical")
    NoteJob.enqueue(Note("flows"))
    foreign(redis_ns, q("lease", "critical"), "list")

    run_burst()

    assert noted == ["flows"]
    assert stuck.refresh() == "pending"
    assert redis_ns.client.lrange(key(redis_ns, q("pending", "critical")), 0, -1) == [
        stuck.id.encode()
    ]


def test_oom__an_operator_can_still_free_memory(
    full_redis: tuple[RedisNamespace, RedisBroker],
) -> None:
    # Deleting is how memory comes back under noeviction: the admin's delete and the janitor
    # only delete, so Redis lets them run (without them only redis-cli could free memory).
    ns, broker = full_redis

    assert broker.delete("default", "b", "pending", None) == "deleted"
    assert broker.janitor("default") == 0  # nothing expired: ran, refused nothing

    assert t("b") not in snapshot(ns)
