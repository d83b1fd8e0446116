"""The broker boundary (issue 13): the calls that replace raw client use outside broker/ (the
worker's burst check and registry removal, JobHandle's state, the inspector's reads), named
replies, and RedisBroker having every member of the Broker Protocol; on the real Redis and with
Redis unavailable."""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs.broker.factory import connect
from django_jobs.broker.protocol import Broker, Deleted
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable
from django_jobs.keys import worker, workers
from tests.conftest import RedisNamespace, free_port


@pytest.fixture
def nowhere(settings: Any) -> RedisBroker:
    """A broker whose Redis does not answer (nothing listens at its port)."""
    settings.JOBS = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "ENQUEUE_TIMEOUT": 0.5}
    jobs = get_settings()
    assert jobs.redis_url is not None
    return RedisBroker(connect(jobs.redis_url, jobs.enqueue_timeout), jobs)


def test_pending_count__sums_the_pending_lists_of_the_queues(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    redis_ns.client.rpush(broker.keys("default").pending, "a", "b")
    redis_ns.client.rpush(broker.keys("low").pending, "c")
    redis_ns.client.rpush(broker.keys("other").pending, "d")

    assert broker.pending_count(["default", "low"]) == 3
    assert broker.pending_count(["empty"]) == 0


def test_pending_count__wrong_typed_pending_key_is_refused_by_name(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    redis_ns.client.set(broker.keys("default").pending, "x")

    with pytest.raises(BrokerRefused, match="WRONGTYPE"):
        broker.pending_count(["default"])


def test_pending_count__redis_unavailable_is_a_read_error(nowhere: RedisBroker) -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        nowhere.pending_count(["default"])

    assert "may still have been applied" not in str(caught.value)


def test_unregister__removes_the_worker_from_the_registry(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    broker.beat("w1", {"pid": 1}, 30)
    broker.beat("w2", {"pid": 2}, 30)

    broker.unregister("w1")

    assert redis_ns.client.zrange(workers(redis_ns.namespace), 0, -1) == [b"w2"]
    assert not redis_ns.client.exists(worker(redis_ns.namespace, "w1"))
    assert redis_ns.client.exists(worker(redis_ns.namespace, "w2"))


def test_unregister__redis_unavailable_raises_broker_unavailable(nowhere: RedisBroker) -> None:
    with pytest.raises(BrokerUnavailable, match="may still have been applied"):
        nowhere.unregister("w1")


def test_broker_protocol__redis_broker_has_every_member(nowhere: RedisBroker) -> None:
    members = {n for n in vars(Broker) if not n.startswith("_")} | set(Broker.__annotations__)

    missing = sorted(n for n in members if not hasattr(nowhere, n))

    assert missing == []
    assert {"queue_infos", "state_ids", "task_infos", "task_state", "workers"} <= members


def test_task_state__the_record_state_or_none(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    redis_ns.client.hset(broker.keys("default").task("a"), "state", "dead")

    assert broker.task_state("default", "a") == "dead"
    assert broker.task_state("default", "gone") is None


def test_task_state__redis_unavailable_is_a_read_error(nowhere: RedisBroker) -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        nowhere.task_state("default", "a")

    assert "may still have been applied" not in str(caught.value)


def test_queue_infos__a_wrong_typed_state_key_is_refused_by_name(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    redis_ns.client.set(broker.keys("default").dead, "x")

    with pytest.raises(BrokerRefused, match=r":\{default\}:dead' is a string, not the sorted set"):
        broker.queue_infos(["default"])


def test_delete__replies_are_named(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    k = broker.keys("default")
    redis_ns.client.hset(k.task("a"), mapping={"state": "active", "msg": ""})
    redis_ns.client.lpush(k.active, "a")

    assert broker.delete("default", "a", "active", None) is Deleted.RUNNING
    assert broker.delete("default", "a", "dead", None) is Deleted.RUNNING
    assert broker.delete("default", "b", "dead", None) is Deleted.GONE


def test_pause__and_resume_flip_the_flag_the_queue_infos_read(redis_ns: RedisNamespace) -> None:
    broker = get_broker()

    broker.pause("default")
    paused = broker.queue_infos(["default"])[0].paused
    broker.resume("default")

    assert (paused, broker.queue_infos(["default"])[0].paused) == (True, False)
