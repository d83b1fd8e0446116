"""Every broker script is atomic under failure (issue 12, item 3).

A Lua script's writes before a failing command stay, so each script checks the keys it writes
before its first write, and Redis refuses a script with a shebang whole under maxmemory. Each
test seeds a key of the wrong type (or fills Redis), runs the transition and compares the whole
namespace: no task lost, none stranded in active without a lease, nothing half-applied, and the
named error (BrokerRefused, a BrokerUnavailable) raised with its message.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
import redis

from django_jobs import BrokerRefused, BrokerUnavailable
from django_jobs.broker import scripts
from django_jobs.broker.redis import COUNTER_TTL, RedisBroker
from django_jobs.client import get_broker
from django_jobs.keys import today
from tests.conftest import RedisNamespace, RedisServer
from tests.integration.test_broker import (
    ACTIVE_A,
    ACTIVE_A_SNAP,
    COMPLETED_A_SNAP,
    PENDING_B,
    held,
    put,
    rec,
    request,
    task,
    verdict,
)
from tests.redis_state import q, snapshot, t


def key(ns: RedisNamespace, name: str) -> str:
    """The full Redis key of a snapshot name such as {default}:lease."""
    return f"{ns.namespace}:{name}"


def foreign(ns: RedisNamespace, name: str, kind: str = "string") -> str:
    """Write a key of another type than ours under a snapshot name; return the full key."""
    full = key(ns, name)
    if kind == "string":
        ns.client.set(full, "written by hand")
    elif kind == "hash":
        ns.client.hset(full, "x", "1")
    elif kind == "list":
        ns.client.rpush(full, "x")
    else:
        ns.client.zadd(full, {"x": 1})
    return full


def refused(act: Any) -> BrokerRefused:
    with pytest.raises(BrokerRefused) as caught:
        act()
    return caught.value


# -- the scripts as sent to Redis -------------------------------------------------------------


def test_scripts__each_opens_with_one_shebang_and_writes_refused_under_oom() -> None:
    for name, source in scripts.SOURCES.items():
        first, _, rest = source.partition("\n")
        assert first.startswith("#!lua"), name
        assert "#!" not in rest, f"{name}: a shebang past the first line"
    assert scripts.SOURCES["extend_lease"].startswith("#!lua flags=allow-oom\n")
    assert scripts.SOURCES["ack"].startswith("#!lua\n")


def test_scripts__reloaded_after_script_flush_on_both_paths(
    private_redis: RedisServer, settings: Any
) -> None:
    # redis-py's Script (EVALSHA, then SCRIPT LOAD on NOSCRIPT) and our raw round trip.
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t"}
    broker = get_broker()
    private_redis.client().script_flush()
    assert [a.state for a in broker.enqueue([request("a"), request("b")])] == ["pending"] * 2
    private_redis.client().script_flush()
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    assert delivery.id == "a"
    private_redis.client().script_flush()
    assert broker.requeue(delivery, crash=False) == "pending"
    private_redis.client().script_flush()
    assert [d.id for d in broker.wait_and_fetch(["default"], 0.1)] == ["a"]


# -- statistics and hints never stop a state change -------------------------------------------


def test_ack__wrong_typed_day_counter_still_acks(redis_ns: RedisNamespace) -> None:
    put(redis_ns, ACTIVE_A)
    foreign(redis_ns, q(f"processed:{today()}"), "list")

    assert get_broker().ack(held("a"), 3600) is True

    snap = snapshot(redis_ns)
    assert snap.pop(q("processed:<day>")) == ("list", ["x"])
    assert snap == {k: v for k, v in COMPLETED_A_SNAP.items() if "processed" not in k}


def test_settle__wrong_typed_day_counter_acks_and_fetches(redis_ns: RedisNamespace) -> None:
    # The worker's hot path (ack_dequeue): the task that ran 3 times and died.
    put(redis_ns, ACTIVE_A)
    put(redis_ns, PENDING_B)
    foreign(redis_ns, q(f"processed:{today()}"))

    written, fetched = get_broker().settle([verdict("ack", retention=3600)], ["default"], 1)

    assert (written, [d.id for d in fetched]) == ([True], ["b"])
    snap = snapshot(redis_ns)
    assert snap[t("a")][1]["state"] == "completed"
    assert snap[q("active")] == ("list", ["b"])
    assert snap[q("lease")][1][0][0] == "b"


@pytest.mark.parametrize("action", ["retry", "kill"])
def test_write__wrong_typed_failed_counter_still_writes(
    redis_ns: RedisNamespace, action: str
) -> None:
    put(redis_ns, ACTIVE_A)
    foreign(redis_ns, q(f"failed:{today()}"), "hash")

    assert get_broker().write(verdict(action, delay=5, error="E: boom")) is True

    snap = snapshot(redis_ns)
    assert snap[t("a")][1]["state"] == ("retry" if action == "retry" else "dead")
    assert snap[t("a")][1]["attempts"] == "1"
    assert q("active") not in snap
    assert q("lease") not in snap
    assert snap[q(f"{'retry' if action == 'retry' else 'dead'}")][1][0][0] == "a"
    assert snap[q("failed:<day>")] == ("hash", {"x": "1"})


def test_retry__garbage_attempts_field_counts_from_zero(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("a", "active", 30, epoch=1, attempts="lots"))

    assert get_broker().write(verdict("retry", delay=5, error="E: boom")) is True

    record = snapshot(redis_ns)[t("a")][1]
    assert (record["state"], record["attempts"]) == ("retry", "1")


def test_enqueue__wrong_typed_wake_key_enqueues_without_a_token(
    redis_ns: RedisNamespace,
) -> None:
    # The lost job: enqueue.lua pushed the id, then failed before writing the record.
    foreign(redis_ns, q("wake"))

    accepted = get_broker().enqueue([request("a")])

    assert [a.state for a in accepted] == ["pending"]
    snap = snapshot(redis_ns)
    assert snap[q("pending")] == ("list", ["a"])
    assert snap[t("a")] == ("hash", rec("a", "pending"))
    assert snap[q("wake")] == ("string", "written by hand")


def test_enqueue_many__wrong_typed_wake_key_enqueues_without_tokens(
    redis_ns: RedisNamespace,
) -> None:
    foreign(redis_ns, q("wake"), "zset")

    accepted = get_broker().enqueue([request("a"), request("b")])

    assert [a.state for a in accepted] == ["pending"] * 2
    assert snapshot(redis_ns)[q("pending")] == ("list", ["b", "a"])


@pytest.mark.parametrize("act", ["requeue", "recover", "forward"])
def test_worker_paths__wrong_typed_wake_key_still_hand_back(
    redis_ns: RedisNamespace, act: str
) -> None:
    broker = get_broker()
    if act == "forward":
        put(redis_ns, task("a", "retry", -1, epoch=1, next_at=-1))
    else:
        put(redis_ns, task("a", "active", -1 if act == "recover" else 30, epoch=1))
    foreign(redis_ns, q("wake"))

    if act == "requeue":
        assert broker.requeue(held("a"), crash=False) == "pending"
    elif act == "recover":
        assert broker.recover("default") == [("a", "pending")]
    else:
        assert broker.forward("default") == 1

    snap = snapshot(redis_ns)
    assert snap[q("pending")] == ("list", ["a"])
    assert snap[t("a")][1]["state"] == "pending"
    assert q("active") not in snap
    assert q("lease") not in snap


# -- keys essential to the state: refused whole, named -----------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "act"),
    [
        pytest.param(q("completed"), "string", lambda b: b.ack(held("a"), 3600), id="ack"),
        pytest.param(q("lease"), "list", lambda b: b.ack(held("a"), 3600), id="ack_lease"),
        pytest.param(q("retry"), "hash", lambda b: b.retry(held("a"), 5, "E", ""), id="retry_set"),
        pytest.param(q("dead"), "list", lambda b: b.kill(held("a"), "E", ""), id="kill_dead"),
        pytest.param(
            q("pending"), "zset", lambda b: b.requeue(held("a"), crash=False), id="requeue"
        ),
        pytest.param(q("pending"), "string", lambda b: b.recover("default"), id="recover"),
        pytest.param(
            q("lease"), "hash", lambda b: b.extend_leases("default", [("a", "1")]), id="extend"
        ),
        pytest.param(q("scheduled"), "string", lambda b: b.forward("default"), id="forward"),
        pytest.param(q("completed"), "list", lambda b: b.janitor("default"), id="janitor"),
        pytest.param("workers", "string", lambda b: b.beat("w1", {"pid": 1}, 10), id="beat"),
        pytest.param(q("dead"), "hash", lambda b: b.run_now("default", "a", "dead"), id="run_now"),
        pytest.param(
            q("retry"), "list", lambda b: b.delete("default", "a", "retry", None), id="delete"
        ),
    ],
)
def test_worker_paths__wrong_typed_state_key_changes_nothing_and_names_it(
    redis_ns: RedisNamespace, name: str, kind: str, act: Any
) -> None:
    put(redis_ns, task("a", "active", -1, epoch=1))
    redis_ns.client.delete(key(redis_ns, name))
    full = foreign(redis_ns, name, kind)
    before = snapshot(redis_ns)

    error = refused(lambda: act(get_broker()))

    assert snapshot(redis_ns) == before
    assert isinstance(error, BrokerUnavailable)  # the worker backs off on it
    assert error.key == full
    assert f"Redis key {full!r} is a {kind}" in str(error)
    assert "not one of ours" in str(error)
    assert "Delete it" in str(error)


@pytest.mark.parametrize(
    ("name", "kind", "requests"),
    [
        pytest.param(q("pending"), "string", [request("a")], id="pending"),
        pytest.param(q("scheduled"), "list", [request("a", delay=60)], id="scheduled"),
        pytest.param(
            q("idem:noop:k"),
            "hash",
            [request("a", idempotency_key="IDEM", idempotency_window=60)],
            id="idempotency_key",
        ),
        pytest.param(q("t:b"), "string", [request("a"), request("b")], id="enqueue_many_record"),
        pytest.param(q("pending"), "hash", [request("a"), request("b")], id="enqueue_many"),
    ],
)
def test_enqueue__wrong_typed_key_enqueues_nothing_and_names_it(
    redis_ns: RedisNamespace, name: str, kind: str, requests: list[Any]
) -> None:
    full = foreign(redis_ns, name, kind)
    requests = [
        dataclasses.replace(r, idempotency_key=full) if r.idempotency_key else r for r in requests
    ]
    before = snapshot(redis_ns)

    error = refused(lambda: get_broker().enqueue(requests))

    assert snapshot(redis_ns) == before
    assert error.key == full
    assert str(error).endswith("nothing was enqueued.")


def test_enqueue__job_api_raises_the_named_error(redis_ns: RedisNamespace) -> None:
    from tests.integration.test_broker import Note, NoteJob

    full = foreign(redis_ns, q("pending", NoteJob.queue))

    error = refused(lambda: NoteJob.enqueue(Note("hi")))

    assert error.key == full
    assert redis_ns.keys() == [full]


# -- dequeue: a broken queue is skipped, the others flow ---------------------------------------


def test_dequeue__wrong_typed_lease_key_skips_its_queue_and_serves_the_next(
    redis_ns: RedisNamespace, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.JOBS = {**settings.JOBS, "QUEUES": ["critical", "default"]}
    broker = get_broker()
    broker.enqueue([request("c1", "critical"), request("c2", "critical")])
    broker.enqueue([request("d1"), request("d2")])
    lease = foreign(redis_ns, q("lease", "critical"))
    before = snapshot(redis_ns)

    with caplog.at_level(logging.WARNING, logger="django_jobs.broker"):
        first = broker.dequeue_many(["critical", "default"], 1)
        second = broker.dequeue_many(["critical", "default"], 1)

    assert [d.id for d in first + second] == ["d1", "d2"]
    after = snapshot(redis_ns)
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
    before = snapshot(redis_ns)

    assert broker.dequeue_many(["default"], 5) == []
    assert snapshot(redis_ns) == before


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
    before = snapshot(ns)

    error = refused(lambda: act(broker))

    assert snapshot(ns) == before
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
