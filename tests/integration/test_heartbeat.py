"""The heartbeat renews leases of running tasks and keeps the worker registry fresh."""

import json
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs import Job, keys
from django_jobs.client import get_broker
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace, wait_until


@dataclass(frozen=True)
class Nothing:
    pass


class Idle(Job[Nothing]):
    def run(self, payload: Nothing) -> None:
        pass


def test_heartbeat__publishes_worker_and_extends_its_leases(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "LEASE": 30, "HEARTBEAT_INTERVAL": 1}
    broker = get_broker()
    Idle.enqueue(Nothing(), queue="default")
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    lease_key = broker.keys("default").lease
    redis_ns.client.zadd(lease_key, {delivery.id: 1})  # about to expire
    beat = Heartbeat(broker, "w1", {"host": "h", "pid": 1}, lambda: [delivery])

    beat.tick()

    assert redis_ns.client.zscore(lease_key, delivery.id) > 1_000_000_000
    entry = redis_ns.client.hgetall(keys.worker(redis_ns.namespace, "w1"))
    assert entry[b"host"] == b"h"
    assert json.loads(entry[b"tasks"]) == [{"id": delivery.id, "queue": "default"}]
    assert redis_ns.client.ttl(keys.worker(redis_ns.namespace, "w1")) == 3
    assert redis_ns.client.zrange(keys.workers(redis_ns.namespace), 0, -1) == [b"w1"]


def test_heartbeat__lost_lease_is_noticed_and_stale_workers_disappear(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "LEASE": 30, "HEARTBEAT_INTERVAL": 0.5}
    broker = get_broker()
    Idle.enqueue(Nothing(), queue="default")
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    redis_ns.client.hincrby(broker.keys("default").task(delivery.id), "epoch", 1)  # recovered
    gone = Heartbeat(broker, "gone", {"host": "h"}, list)
    gone.tick()
    beat = Heartbeat(broker, "alive", {"host": "h"}, lambda: [delivery])

    beat.tick()
    assert beat.lost == {(delivery.id, delivery.epoch)}
    wait_until(lambda: not redis_ns.client.exists(keys.worker(redis_ns.namespace, "gone")))
    beat.tick()

    assert redis_ns.client.zrange(keys.workers(redis_ns.namespace), 0, -1) == [b"alive"]


def test_heartbeat__corrupt_workers_key_does_not_stop_lease_renewal(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    # Found trying it (issue 12): the beat went first, and its failure skipped the renewal, so
    # the recoverers handed the running task to a second run.
    settings.JOBS = {**settings.JOBS, "LEASE": 30, "HEARTBEAT_INTERVAL": 1}
    broker = get_broker()
    Idle.enqueue(Nothing(), queue="default")
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    lease_key = broker.keys("default").lease
    redis_ns.client.zadd(lease_key, {delivery.id: 1})  # about to expire
    redis_ns.client.set(keys.workers(redis_ns.namespace), "not a sorted set")
    beat = Heartbeat(broker, "w1", {"host": "h", "pid": 1}, lambda: [delivery])

    with pytest.raises(Exception, match=r"WRONGTYPE|workers"):
        beat.tick()  # the failed beat still says so (the ticker logs it)...

    # ...but the lease was renewed first, so no recoverer takes the task while it runs
    assert redis_ns.client.zscore(lease_key, delivery.id) > 1_000_000_000
    assert broker.recover("default") == []


def test_heartbeat__a_lost_lease_is_reported_once_with_the_time_since_renewal(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "LEASE": 30, "HEARTBEAT_INTERVAL": 1}
    broker = get_broker()
    Idle.enqueue(Nothing(), queue="default")
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    now = [100.0]
    reported: list[tuple[str, float]] = []
    beat = Heartbeat(
        broker, "w1", {"host": "h"}, lambda: [delivery],
        on_lost=lambda d, since: reported.append((d.id, since)), clock=lambda: now[0],
    )  # fmt: skip
    beat.tick()
    redis_ns.client.hincrby(broker.keys("default").task(delivery.id), "epoch", 1)  # recovered
    now[0] += 41

    beat.tick()
    beat.tick()

    assert reported == [(delivery.id, 41.0)]
