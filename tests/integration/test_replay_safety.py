"""A fetch is never sent twice, and a fetch that came with a refusal is handed back.

Found by review (issue 12, "none stranded"): redis-py's one retry and our own round trip's retry
replayed a dequeue whose reply was lost, moving a second task to active and handing out only
one; and `settle` dropped the task its pipelined fetch had moved to active when an outcome
before it was refused.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from django_jobs.broker.factory import connect
from django_jobs.broker.protocol import Action, Delivery, EnqueueRequest, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable
from django_jobs.worker.child import Child
from django_jobs.worker.slots import SlotTable
from tests.conftest import CLUSTER_LEG, RedisNamespace


class LosingProxy:
    """A TCP proxy to Redis that, when told, drops the connection instead of passing on the
    next reply: Redis ran the command, the client never hears of it."""

    def __init__(self, port: int = 6379) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.target = port
        self.lose_next = threading.Event()
        #: Replies to pass on, once lose_next is set, before the lost one.
        self.skip = 0
        #: EVALSHA commands clients sent through this proxy (counted here, not with the shared
        #: server's INFO commandstats, which every other test running meanwhile adds to).
        self.evalshas = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [])
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is client:
                        self.evalshas += data.count(b"$7\r\nEVALSHA\r\n")
                    if source is upstream and self.lose_next.is_set():
                        if not self.skip:
                            self.lose_next.clear()
                            return  # the reply is lost with the connection
                        self.skip -= 1
                    (upstream if source is client else client).sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self.closed = True
        self.server.close()


def through(proxy: LosingProxy, ns: RedisNamespace, blocking: float = 0.0) -> RedisBroker:
    """A broker whose connections to the server holding `default` go through proxy: on a
    Cluster (its leg), the client's map sends that master's slots to the proxy."""
    if not CLUSTER_LEG:
        return RedisBroker(
            connect(f"redis://127.0.0.1:{proxy.port}/0", 2.0, blocking=blocking), get_settings()
        )
    client: Any = connect(ns.url, 2.0, blocking=blocking)
    real, near = ("127.0.0.1", proxy.target), ("127.0.0.1", proxy.port)
    client.nodes_manager.address_remap = lambda at: near if tuple(at) == real else at
    client.nodes_manager.initialize()
    return RedisBroker(client, get_settings())


@pytest.fixture
def proxied(redis_ns: RedisNamespace) -> Iterator[tuple[RedisBroker, LosingProxy]]:
    if CLUSTER_LEG:
        port = redis_ns.client.get_node_from_key(f"{redis_ns.namespace}:{{default}}:x").port
    else:
        port = redis_ns.client.connection_pool.connection_kwargs["port"]
    proxy = LosingProxy(int(port))
    broker = through(proxy, redis_ns)
    # A one-off dequeue goes on a pool connection, an enqueue on a spare one (connection.py):
    # the pool's is opened first, so that a reply lost next is a call's, not a connect's.
    assert broker.dequeue(["default"]) is None
    yield broker, proxy
    broker.client.close()
    proxy.close()


def request(task_id: str) -> EnqueueRequest:
    return EnqueueRequest(
        id=task_id, queue="default", encoded='{"v": 1}', delay=0.0, eta=None,
        idempotency_key=None, idempotency_window=0.0,
    )  # fmt: skip


def opened(broker: RedisBroker) -> None:
    """Open the connections a child has open when it fetches (its own; on a Cluster its wait's
    too), by a wait that finds nothing: a reply lost next is a call's, not a connect's."""
    assert broker.wait_and_fetch(["default"], 0.01) == []


def lose_wait(proxy: LosingProxy) -> None:
    """Lose the reply of the next wait's fetch: on one server the BLPOP's and the fetch's (one
    round trip); on a Cluster the fetch's, after the BLPOP's (cluster_wait.py)."""
    proxy.skip = 1 if CLUSTER_LEG else 0
    proxy.lose_next.set()


def active(ns: RedisNamespace) -> list[bytes]:
    return list(ns.client.lrange(f"{ns.namespace}:{{default}}:active", 0, -1))


def test_settle__a_fetch_whose_reply_was_lost_is_not_sent_again(
    proxied: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace
) -> None:
    broker, proxy = proxied
    opened(broker)
    broker.enqueue([request("a" * 32), request("b" * 32)])

    proxy.lose_next.set()
    with pytest.raises(BrokerUnavailable):
        broker.settle([], ["default"], 1)

    # One task went to active with the fetch that ran; the other is still pending, not moved
    # by a replay and handed out while the first waits for its lease.
    assert active(redis_ns) == [b"a" * 32]
    assert redis_ns.client.lrange(f"{redis_ns.namespace}:{{default}}:pending", 0, -1) == [b"b" * 32]

    _, fetched = broker.settle([], ["default"], 1)

    # The task the lost fetch took is handed out now (its receipt found it: broker/receipts.py),
    # not left in active until its lease expires while the next one is taken; nothing spent.
    assert [(d.id, d.attempts, d.crashes) for d in fetched] == [("a" * 32, 0, 0)]
    assert active(redis_ns) == [b"a" * 32]
    assert redis_ns.client.lrange(f"{redis_ns.namespace}:{{default}}:pending", 0, -1) == [b"b" * 32]


def test_dequeue__a_reply_lost_is_not_replayed_by_the_client(
    proxied: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace
) -> None:
    broker, proxy = proxied
    broker.enqueue([request("a" * 32), request("b" * 32)])

    proxy.lose_next.set()
    with pytest.raises(BrokerUnavailable):
        broker.dequeue(["default"])

    assert active(redis_ns) == [b"a" * 32]
    again = broker.dequeue(["default"])  # gives back what the lost one took, and takes it
    assert again is not None
    assert again.id == "a" * 32
    assert active(redis_ns) == [b"a" * 32]


def test_settle__a_refused_outcome_hands_back_what_its_fetch_took(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    broker.enqueue([request("a" * 32)])
    running = broker.dequeue(["default"])
    assert running is not None
    broker.enqueue([request("b" * 32)])
    redis_ns.client.set(f"{redis_ns.namespace}:{{default}}:retry", "written by hand")
    failed = Verdict(running.id, "default", running.epoch, "job", Action.RETRY, delay=5.0)

    with pytest.raises(BrokerRefused):
        broker.settle([failed], ["default"], 1)

    # The outcome is refused (the task stays active, its lease kept); the task the pipelined
    # fetch had moved to active is back in pending, not stranded.
    assert active(redis_ns) == [b"a" * 32]
    record = redis_ns.client.hgetall(f"{redis_ns.namespace}:{{default}}:t:{'b' * 32}")
    assert record[b"state"] == b"pending"
    assert redis_ns.client.lrange(f"{redis_ns.namespace}:{{default}}:pending", 0, -1) == [b"b" * 32]


def test_give_back_unsure__a_stopping_child_gives_back_what_its_lost_wait_fetched(
    proxied: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace
) -> None:
    broker, proxy = proxied
    opened(broker)
    broker.enqueue([request("a" * 32)])
    lose_wait(proxy)
    with pytest.raises(BrokerUnavailable):
        broker.wait_and_fetch(["default"], 0.01)

    assert broker.give_back_unsure() == 1

    # Back at the head of pending at once, not after its lease, and no crash counted.
    assert active(redis_ns) == []
    assert redis_ns.client.lrange(f"{redis_ns.namespace}:{{default}}:pending", 0, -1) == [b"a" * 32]
    record = redis_ns.client.hgetall(f"{redis_ns.namespace}:{{default}}:t:{'a' * 32}")
    assert record[b"state"] == b"pending"
    assert set(record) & {b"crashes", b"attempts"} == set()  # none counted (0)
    assert broker.give_back_unsure() == 0


def test_child__stopped_after_its_wait_lost_its_reply_gives_back_what_the_wait_took(
    proxied: tuple[RedisBroker, LosingProxy],
    redis_ns: RedisNamespace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An idle child's wait-and-fetch took a task, the reply was lost (the connection broke),
    # and the stop came: the exiting child gives the task back instead of leaving it in active
    # until its lease expires (then counted as a crash by the recoverer).
    broker, proxy = proxied
    child = Child(broker, ["default"], SlotTable(1), 0, os.getppid())
    monkeypatch.setattr(child, "_install_signals", lambda: None)
    wait_and_fetch = broker.wait_and_fetch

    def lost_then_sigterm(queues: Sequence[str], timeout: float) -> list[Delivery]:
        broker.enqueue([request("a" * 32)])
        lose_wait(proxy)
        try:
            return wait_and_fetch(queues, timeout)
        finally:
            child.stopping = True  # what Child._on_term does

    opened(broker)
    monkeypatch.setattr(broker, "wait_and_fetch", lost_then_sigterm)

    child.run()

    assert active(redis_ns) == []
    assert redis_ns.client.lrange(f"{redis_ns.namespace}:{{default}}:pending", 0, -1) == [b"a" * 32]
    record = redis_ns.client.hgetall(f"{redis_ns.namespace}:{{default}}:t:{'a' * 32}")
    assert (record[b"state"], record.get(b"crashes")) == (b"pending", None)  # no crash counted


def test_give_back__a_task_asked_to_cancel_meanwhile_is_canceled_not_handed_out_again(
    proxied: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace
) -> None:
    broker, proxy = proxied
    broker.enqueue([request("a" * 32)])
    proxy.lose_next.set()
    with pytest.raises(BrokerUnavailable):
        broker.dequeue(["default"])
    get_broker().cancel("default", "a" * 32)  # active: marked for its run to stop

    assert broker.dequeue(["default"]) is None

    record = redis_ns.client.hgetall(f"{redis_ns.namespace}:{{default}}:t:{'a' * 32}")
    assert record[b"state"] == b"canceled"
    assert active(redis_ns) == []


def test_wait_and_fetch__after_a_lost_reply_hands_out_its_task_without_waiting_for_a_token(
    proxied: tuple[RedisBroker, LosingProxy], redis_ns: RedisNamespace
) -> None:
    _, proxy = proxied
    broker = through(proxy, redis_ns, blocking=20.0)
    opened(broker)
    broker.enqueue([request("a" * 32)])
    lose_wait(proxy)
    with pytest.raises(BrokerUnavailable):
        broker.wait_and_fetch(["default"], 0.01)  # took a and its token; the reply was lost

    started = time.monotonic()
    fetched = broker.wait_and_fetch(["default"], 20.0)

    # Given back before the wait, not after it: its token makes the wait return at once.
    assert [d.id for d in fetched] == ["a" * 32]
    assert time.monotonic() - started < 10.0
