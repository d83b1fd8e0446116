"""ClusterWire's round trip when one node fails while its replies are read (broker/cluster.py).

Fake nodes: a real Cluster cannot time out one node's read, between two others', on cue. Each
fake connection answers every command it was sent with a reply naming the call it belongs to.
"""

from __future__ import annotations

import itertools
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from django_jobs.broker.cluster import ClusterWire, PartlyAnswered

CALLS = itertools.count()


class Conn:
    def __init__(self, name: str, fail: type[Exception] | None) -> None:
        self.name, self.fail = name, fail
        self.queue: deque[bytes] = deque()
        self.disconnected = 0

    def send_packed_command(self, packed: list[bytes], check_health: bool = False) -> None:
        call = next(CALLS)
        for _ in range(packed[0].count(b"*2\r\n")):  # one reply per command (all GET key)
            self.queue.append(f"{self.name}:call-{call}".encode())

    def read_response(self, disable_decoding: bool = False) -> bytes:
        if self.fail is not None:
            raise self.fail("Timeout reading from socket")
        return self.queue.popleft()

    def disconnect(self) -> None:
        self.disconnected += 1
        self.queue.clear()


class Pool:
    def __init__(self, conn: Conn) -> None:
        self.conn, self.out = conn, 0

    def make_connection(self) -> Conn:
        return self.conn

    def get_connection(self, *args: Any) -> Conn:
        self.out += 1
        return self.conn

    def release(self, conn: Conn) -> None:
        self.out -= 1


def wire_of(conns: dict[str, Conn]) -> tuple[ClusterWire, dict[str, Pool]]:
    """x owns {a}, y owns {b}; x is written to and read first."""
    pools = {name: Pool(conn) for name, conn in conns.items()}
    nodes = {
        name: SimpleNamespace(name=name, redis_connection=SimpleNamespace(connection_pool=pool))
        for name, pool in pools.items()
    }
    owner = {key_slot(b"{a}:k"): nodes["x"], key_slot(b"{b}:k"): nodes["y"]}
    manager = SimpleNamespace(get_node_from_slot=lambda slot: owner[slot])
    return ClusterWire(SimpleNamespace(nodes_manager=manager), 1.0, ()), pools  # type: ignore[arg-type]


@pytest.mark.parametrize("fail", [redis.TimeoutError, KeyboardInterrupt])
def test_a_node_failing_mid_read_leaves_no_unread_reply_for_the_next_call(
    fail: type[Exception],
) -> None:
    conns = {"x": Conn("x", fail=fail), "y": Conn("y", fail=None)}
    wire, _ = wire_of(conns)
    with pytest.raises(fail):
        wire.round_trip([("GET", "{a}:k"), ("GET", "{b}:k")], own=True)
    # y was written to and never read: its next call must read its own reply, not that one.
    (reply,) = wire.round_trip([("GET", "{b}:k")], own=True)
    assert reply == f"y:call-{next(CALLS) - 1}".encode()


def test_a_node_failing_mid_read_gives_every_pool_connection_back() -> None:
    conns = {"x": Conn("x", fail=redis.TimeoutError), "y": Conn("y", fail=None)}
    wire, pools = wire_of(conns)
    with pytest.raises(redis.TimeoutError):
        wire.round_trip([("GET", "{a}:k"), ("GET", "{b}:k")], own=False)
    assert [pools["x"].out, pools["y"].out] == [0, 0]
    assert conns["y"].disconnected, "y's connection went back to its pool with a reply unread"


def test_a_node_lost_after_the_write_raises_with_what_the_others_answered() -> None:
    # A dequeue (not replayable) on y answered; x's connection broke: the caller is told what
    # y answered (PartlyAnswered), so the tasks y's dequeue took can be given back.
    conns = {"x": Conn("x", fail=redis.ConnectionError), "y": Conn("y", fail=None)}
    wire, _ = wire_of(conns)
    with pytest.raises(PartlyAnswered) as raised:
        wire.round_trip([("GET", "{a}:k"), ("GET", "{b}:k")], own=True, replayable=False)
    assert raised.value.replies[1] == f"y:call-{next(CALLS) - 1}".encode()
