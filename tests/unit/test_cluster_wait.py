"""An idle child's wait on a Cluster (broker/cluster_wait.py) once its fetch took a task: what
can still fail there (the other BLPOPs' answers, the spare tokens' LPUSH) is about wake-up
tokens only, so the task goes to the child, not stranded in active until its lease. Fake
connections over socket pairs (select needs real sockets): a Cluster cannot fail a BLPOP's
read after the fetch on cue."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from django_jobs.broker.cluster_wait import ClusterWait
from django_jobs.broker.protocol import Delivery
from django_jobs.keys import QueueKeys

TASK = Delivery(
    id="t1", queue="a", raw=b"{}", attempts=0, crashes=0, epoch="1", enqueued_at=None,
    first_unknown_at=None, lease_deadline=0.0,
)  # fmt: skip


class Conn:
    """A BLPOP connection: readable once `answer` is called; `fail` raises on its read."""

    def __init__(self, fail: bool = False) -> None:
        self._sock, self.peer = socket.socketpair()
        self.fail, self.read, self.disconnected = fail, 0, 0

    def answer(self) -> None:
        self.peer.send(b"x")

    def send_packed_command(self, packed: Any, check_health: bool = False) -> None:
        pass

    def read_response(self, disable_decoding: bool = False) -> Any:
        self.read += 1
        if self.fail:
            raise redis.ConnectionError("Error while reading from socket")
        return [b"wake", b"1"]

    def disconnect(self) -> None:
        self.disconnected += 1


class Wait(ClusterWait):
    def __init__(self, conns: dict[str, Conn], ids: dict[str, int], lpush_fails: bool) -> None:
        self._waits = {q: (q, c) for q, c in conns.items()}
        self._waits_pid, self._wait_error = os.getpid(), None
        self._wait_ids = {id(conns[q]): n for q, n in ids.items()}
        self.conns, self.lpush_fails, self.url = conns, lpush_fails, "redis://fake"
        self.wire: Any = SimpleNamespace(node=lambda slot: SimpleNamespace(name="n"))
        self.handed: list[Delivery] = []

    def keys(self, queue: str) -> QueueKeys:
        return QueueKeys("t", queue)

    def _wait_connection(self, queue: str, node: Any) -> Any:
        return self.conns[queue]

    def fetch(self, queues: Sequence[str], count: int, **kw: Any) -> Any:
        return [], [TASK], None

    def _round_trip(self, commands: Any, **kw: Any) -> list[Any]:
        if self.lpush_fails:
            raise redis.ConnectionError("node gone")
        return [1 for _ in commands]

    def hand_back(self, deliveries: Sequence[Delivery], reason: str) -> int:
        self.handed += deliveries
        return len(deliveries)

    def give_back_unsure(self) -> int:
        return 0


@pytest.fixture
def conns() -> Iterator[dict[str, Conn]]:
    made = {"a": Conn(), "b": Conn()}
    yield made
    for conn in made.values():
        conn._sock.close()
        conn.peer.close()


def test_a_blpop_read_failing_after_the_fetch_leaves_the_task_to_the_child(
    conns: dict[str, Conn],
) -> None:
    conns["a"].answer()
    conns["b"].fail = True  # b's answer (to its unblock) cannot be read
    wait = Wait(conns, {"a": 1, "b": 2}, lpush_fails=False)
    assert wait.cluster_wait(["a", "b"], 5.0) == [TASK]
    assert conns["b"].disconnected == 1


def test_the_spare_tokens_lpush_failing_leaves_the_task_to_the_child(
    conns: dict[str, Conn],
) -> None:
    conns["a"].answer()  # b's BLPOP took a token too before its unblock: one spare
    wait = Wait(conns, {"a": 1, "b": 2}, lpush_fails=True)
    assert wait.cluster_wait(["a", "b"], 5.0) == [TASK]


def test_a_blpop_that_got_no_unblock_is_not_waited_for(conns: dict[str, Conn]) -> None:
    conns["a"].answer()
    wait = Wait(conns, {"a": 1}, lpush_fails=False)  # b's CLIENT ID was denied: no unblock
    assert wait.cluster_wait(["a", "b"], 5.0) == [TASK]
    assert (conns["b"].read, conns["b"].disconnected) == (0, 1)  # dropped, not read (blocks)


def test_a_blpop_whose_answer_is_lost_counts_as_woken_and_the_fetch_runs(
    conns: dict[str, Conn],
) -> None:
    conns["a"].answer()
    conns["a"].fail = True  # its answer (it may have taken a token) lost with the connection
    wait = Wait(conns, {"a": 1}, lpush_fails=False)
    assert wait.cluster_wait(["a"], 5.0) == [TASK]
    assert conns["a"].disconnected == 1
