"""An enqueue is sent once (issue 22 review): what its spare connections may and may not resend.

A task record is the replay guard of an enqueue, and an ack with a retention of 0 deletes it: a
resent enqueue whose first send Redis ran, and a worker took and acked meanwhile, would make a
second task. So a spare connection the server closed is found before the call is sent (and
reopened then), and a call sent once is never sent again: its lost reply is a BrokerUnavailable
saying the task may have gone in, and how to make a retry safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import TryAgainError

from django_jobs.broker.factory import connect
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable
from tests.conftest import CLUSTER_LEG, RedisNamespace, RedisServer
from tests.integration.test_replay_safety import LosingProxy, through


def req(task_id: str, key: str | None = None) -> EnqueueRequest:
    return EnqueueRequest(task_id, "default", "{}", idempotency_key=key)


def evalsha_calls(proxy: LosingProxy) -> int:
    """The EVALSHA calls sent through proxy to the server holding `default` (the shared
    server's INFO commandstats counted every test's: 18 for 1 under pytest -n 4)."""
    return proxy.evalshas


@pytest.fixture
def lossy(redis_ns: RedisNamespace) -> Iterator[tuple[RedisBroker, LosingProxy]]:
    if CLUSTER_LEG:
        port = redis_ns.client.get_node_from_key(f"{redis_ns.namespace}:{{default}}:x").port
    else:
        port = redis_ns.client.connection_pool.connection_kwargs["port"]
    proxy = LosingProxy(int(port))
    broker = through(proxy, redis_ns)
    broker.enqueue([req("warm")])  # the spare opened, the scripts loaded (a Cluster's node's too)
    broker.enqueue([req("warm-1"), req("warm-2")])
    yield broker, proxy
    broker.client.close()
    proxy.close()


@pytest.mark.parametrize("tasks", [1, 3])
def test_enqueue__a_lost_reply_is_not_sent_again_and_says_how_to_retry_safely(
    lossy: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace, tasks: int
) -> None:
    broker, proxy = lossy
    before = evalsha_calls(proxy)
    proxy.lose_next.set()

    with pytest.raises(BrokerUnavailable) as info:
        broker.enqueue([req(f"t{n}") for n in range(tasks)])

    assert evalsha_calls(proxy) - before == 1, "sent once"
    assert "may still have been enqueued" in str(info.value)
    assert "idempotency key" in str(info.value)
    pending = redis_ns.client.llen(f"{redis_ns.namespace}:{{default}}:pending")
    assert pending == 3 + tasks  # Redis ran it, once
    assert broker.enqueue([req("next")])[0].state == "pending"  # the spare reconnects


def test_enqueue__with_retention_0_a_lost_reply_never_makes_a_second_task(
    lossy: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace
) -> None:
    broker, proxy = lossy
    worker = RedisBroker(connect(redis_ns.url, 2.0), get_settings())
    for _ in range(3):  # the warm-up's tasks out of the way
        assert worker.dequeue(["default"]) is not None
    proxy.lose_next.set()
    with pytest.raises(BrokerUnavailable):
        broker.enqueue([req("once")])
    delivery = worker.dequeue(["default"])  # a worker took it, ran it, its record is deleted
    assert delivery is not None
    assert delivery.id == "once"
    assert worker.ack(delivery, retention=0)

    assert worker.dequeue(["default"]) is None, "no second task"


def test_enqueue__spares_do_not_count_against_the_pools_max_connections(
    private_redis: RedisServer, settings: Any
) -> None:
    settings.JOBS = {
        "REDIS_URL": private_redis.url + "?max_connections=3",
        "NAMESPACE": "t",
        "ENQUEUE_TIMEOUT": 2,
    }
    broker = get_broker()
    broker.enqueue([req("warm")])  # the script loaded (a NOSCRIPT takes a pool connection)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def enqueue(t: int) -> None:
        barrier.wait(timeout=10)
        for n in range(50):
            try:
                broker.enqueue([req(f"{t}-{n}")])
            except BaseException as exc:  # counted, then asserted on
                errors.append(exc)
                return

    threads = [threading.Thread(target=enqueue, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert len(broker._spares[1]) <= 3, "no more spares kept than the pool's max_connections"
    assert broker.client.ping()  # the pool's calls still get a connection
    assert broker.dequeue(["default"]) is not None
    assert private_redis.client().llen("t:{default}:pending") == 1 + 6 * 50 - 1


class MovingWire:
    """A Cluster wire whose every call meets a slot on the move (TRYAGAIN)."""

    def round_trip(self, commands: Any, *, own: bool, replayable: bool = True) -> list[Any]:
        return [TryAgainError("Multiple keys request during rehashing of slot") for _ in commands]


@pytest.mark.parametrize("delays", [[0.0], [0.0, 0.0], [0.0, 60.0]])  # one, many, pipelined
def test_enqueue__a_slot_on_the_move_is_refused_alike_for_one_task_or_many(
    redis_ns: RedisNamespace, delays: list[float]
) -> None:
    broker = get_broker()
    broker.wire = MovingWire()  # type: ignore[assignment]
    requests = [EnqueueRequest(f"m{n}", "default", "{}", delay=d) for n, d in enumerate(delays)]
    try:
        with pytest.raises(BrokerRefused) as info:
            broker.enqueue(requests)
    finally:
        broker.wire = None
    assert "nothing was enqueued" in str(info.value)
