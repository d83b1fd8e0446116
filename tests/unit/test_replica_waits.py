"""REPLICA_ACKS on a Redis Cluster: every script is covered by a WAIT on the master it ran on
(broker/replicas.py), also when a MOVED sent one on to a master that had its WAIT already.

Fake nodes: a real Cluster cannot move a slot between two commands of one round trip on cue.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from redis.cluster import ClusterNode
from redis.crc import key_slot

from django_jobs.broker.replicas import replicated


def test_a_script_moved_onto_a_master_already_waited_for_is_waited_for_again() -> None:
    x, y = ClusterNode("x", 1), ClusterNode("y", 1)  # type: ignore[no-untyped-call]
    owner = {key_slot(b"{qa}:t"): y, key_slot(b"{q1}:t"): x, key_slot(b"{q2}:t"): x}
    sent: list[list[Any]] = []

    def round_trip(commands: list[Any], own: bool) -> list[Any]:
        sent.append(commands)
        if len(sent) == 1:
            # {q1}'s slot moved from x to y: MOVED from x, sent on to y after y's WAIT.
            owner[key_slot(b"{q1}:t")] = y
        return [1 if isinstance(c[0], ClusterNode) else b"ok" for c in commands]

    broker = SimpleNamespace(
        settings=SimpleNamespace(replica_acks=1, replica_acks_timeout=1.0),
        wire=SimpleNamespace(node=lambda slot: owner[slot]),
        scripts={"enqueue": SimpleNamespace(sha="sha", script="")},
        _round_trip=round_trip,
        client=None,
        url="redis+cluster://x:1",
    )
    calls: list[tuple[str, list[str], list[Any]]] = [
        ("enqueue", ["{qa}:t"], []),
        ("enqueue", ["{q1}:t"], []),
        ("enqueue", ["{q2}:t"], []),
    ]
    # The masters written to are y then x before and after the move: the same list.
    replicated(broker, calls, errors=False)  # type: ignore[arg-type]
    assert len(sent) == 2, "the moved script's WAIT never followed it"
    waited = [c[0].name for c in sent[1] if isinstance(c[0], ClusterNode)]
    assert waited == ["y:1", "x:1"]
