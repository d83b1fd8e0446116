"""Every broker script is atomic under failure (issue 12, item 3).

A Lua script's writes before a failing command stay, so each script checks the keys it writes
before its first write, and Redis refuses a script with a shebang whole under maxmemory. Each
test seeds a key of the wrong type (or fills Redis), runs the transition and compares the whole
namespace: no task lost, none stranded in active without a lease, nothing half-applied, and the
named error (BrokerRefused, a BrokerUnavailable) raised with its message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from django_jobs import BrokerRefused, BrokerUnavailable
from django_jobs.broker import scripts
from django_jobs.client import get_broker
from django_jobs.keys import today
from tests.conftest import RedisNamespace, RedisServer
from tests.integration.test_broker import (
    ACTIVE_A,
    COMPLETED_A_SNAP,
    PENDING_B,
    held,
    put,
    rec,
    request,
    task,
    verdict,
)
from tests.redis_state import q, redis_now, snapshot, t


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
        pytest.param(q("lease"), "hash", lambda b: b.ack(held("a"), 0), id="ack_lease_keep_0"),
        pytest.param(q("active"), "zset", lambda b: b.ack(held("a"), 3600), id="ack_active"),
        pytest.param(
            q("active"), "string", lambda b: b.retry(held("a"), 5, "E", ""), id="retry_active"
        ),
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
        pytest.param("{workers}", "string", lambda b: b.beat("w1", {"pid": 1}, 10), id="beat"),
        pytest.param(q("dead"), "hash", lambda b: b.run_now("default", "a", "dead"), id="run_now"),
        pytest.param(
            q("retry"), "list", lambda b: b.delete("default", "a", "retry", None), id="delete"
        ),
        pytest.param(q("canceled"), "list", lambda b: b.cancel("default", "a"), id="cancel"),
        pytest.param(
            q("canceled"), "string", lambda b: b.end_canceled(held("a"), "E", ""), id="end_canceled"
        ),
        pytest.param(
            q("active"), "zset", lambda b: b.end_canceled(held("a"), "E", ""), id="end_canc_active"
        ),
        pytest.param(q("canceled"), "hash", lambda b: b.janitor("default"), id="janitor_canceled"),
    ],
)
def test_worker_paths__wrong_typed_state_key_changes_nothing_and_names_it(
    redis_ns: RedisNamespace, name: str, kind: str, act: Any
) -> None:
    put(redis_ns, task("a", "active", -1, epoch=1))
    redis_ns.client.delete(key(redis_ns, name))
    full = foreign(redis_ns, name, kind)
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)

    error = refused(lambda: act(get_broker()))

    assert snapshot(redis_ns, now) == before
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
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)

    error = refused(lambda: get_broker().enqueue(requests))

    assert snapshot(redis_ns, now) == before
    assert error.key == full
    assert str(error).endswith("nothing was enqueued.")


def test_enqueue__job_api_raises_the_named_error(redis_ns: RedisNamespace) -> None:
    from tests.integration.test_broker import Note, NoteJob

    full = foreign(redis_ns, q("pending", NoteJob.queue))

    error = refused(lambda: NoteJob.enqueue(Note("hi")))

    assert error.key == full
    assert redis_ns.keys() == [full]
