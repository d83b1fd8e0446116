"""REPLICA_ACKS on a Redis Cluster: every script is covered by a WAIT on the master it ran on, in
the write that ran it (broker/replicas.py, ClusterWire.round_trip's `then`), also when a MOVED
sends one on to a master that had its WAIT already.

Fake nodes: a real Cluster cannot move a slot between two commands of one round trip on cue.
"""

from __future__ import annotations

import re
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import MovedError

from django_jobs.broker.cluster import ClusterWire
from django_jobs.broker.replicas import replicated
from django_jobs.exceptions import ReplicaAckTimeout

COMMAND = re.compile(rb"\*\d+\r\n\$\d+\r\n(EVALSHA|WAIT|ASKING)\r\n(?:\$\d+\r\n[^\r]*\r\n){0,3}")


class Conn:
    """Answers each command it is written: a script `ok` (or MOVED, when its key's slot moved
    away), a WAIT the next of `acks`."""

    def __init__(self, name: str, acks: list[int], moved: dict[bytes, str]) -> None:
        self.name, self.acks, self.moved = name, deque(acks), moved
        self.queue: deque[Any] = deque()
        self.writes: list[list[bytes]] = []

    def send_packed_command(self, packed: list[bytes], check_health: bool = False) -> None:
        written = []
        for match in COMMAND.finditer(packed[0]):
            written.append(match.group(1))
            if match.group(1) == b"WAIT":
                self.queue.append(self.acks.popleft())
            else:
                key = re.search(rb"\{q\w*\}:t", match.group(0))
                assert key is not None
                moved = self.moved.pop(key.group(0), None)
                self.queue.append(MovedError(moved) if moved else [b"ok", b"pending"])
        self.writes.append(written)

    def read_response(self, disable_decoding: bool = False) -> Any:
        reply = self.queue.popleft()
        if isinstance(reply, Exception):
            raise reply
        return reply

    def disconnect(self) -> None:
        self.queue.clear()


class Pool:
    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def get_connection(self, *args: Any) -> Conn:
        return self.conn

    def release(self, conn: Conn) -> None:
        pass


def test_a_script_moved_onto_a_master_already_waited_for_gets_a_wait_after_it_there() -> None:
    # x owns {q1} and {q2}, y owns {qa}; {q1}'s slot has moved to y (x answers MOVED).
    q1 = key_slot(b"{q1}:t")
    conns = {
        "x": Conn("x", acks=[1], moved={b"{q1}:t": f"{q1} y:1"}),
        "y": Conn("y", acks=[1, 0], moved={}),  # its replica has {qa}'s task, not {q1}'s
    }
    nodes = {
        name: SimpleNamespace(
            name=name, redis_connection=SimpleNamespace(connection_pool=Pool(conn))
        )
        for name, conn in conns.items()
    }
    owner = {key_slot(b"{qa}:t"): nodes["y"], q1: nodes["x"], key_slot(b"{q2}:t"): nodes["x"]}

    def move_slot(error: MovedError) -> None:
        owner[error.slot_id] = nodes[error.host]

    manager = SimpleNamespace(
        get_node_from_slot=lambda slot: owner[slot], move_slot=move_slot, initialize=lambda: None
    )
    wire = ClusterWire(SimpleNamespace(nodes_manager=manager), 1.0, ())  # type: ignore[arg-type]
    broker = SimpleNamespace(
        settings=SimpleNamespace(replica_acks=1, replica_acks_timeout=1.0),
        wire=wire,
        scripts={"enqueue": SimpleNamespace(sha="sha", script="")},
        client=None,
        url="redis+cluster://x:1",
    )
    calls: list[tuple[str, list[str], list[Any]]] = [
        ("enqueue", ["{qa}:t"], []),
        ("enqueue", ["{q1}:t"], []),
        ("enqueue", ["{q2}:t"], []),
    ]

    # The moved script ran on y in a write of its own, with y's WAIT after it: 0 confirmed
    with pytest.raises(ReplicaAckTimeout, match="only 0 of the 1"):
        replicated(broker, calls, errors=False)  # type: ignore[arg-type]
    assert conns["x"].writes == [[b"EVALSHA", b"EVALSHA", b"WAIT"]]
    assert conns["y"].writes == [[b"EVALSHA", b"WAIT"], [b"EVALSHA", b"WAIT"]]
