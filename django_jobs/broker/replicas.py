"""JOBS["REPLICA_ACKS"]: an enqueue returns once that many replicas have its tasks (Redis WAIT).

Redis replicates asynchronously: the primary answers a write before any replica has it, so a
failover (the sentinels promoting a replica after the primary died) loses what the primary had
not sent yet. With REPLICA_ACKS = n the broker sends `WAIT n <timeout ms>` right after the
enqueue's script calls, on the same connection and in the same round trip. WAIT answers once n
replicas have every write this connection made (the scripts' included: they ran first), or when
JOBS["REPLICA_ACKS_TIMEOUT"] has passed, with how many did; fewer than n is ReplicaAckTimeout.
On a Redis Cluster each master the scripts go to gets a WAIT of its own (`_waits`).

Only enqueues wait (`RedisBroker.enqueue`: a single task, enqueue_many's batches, the outbox's
sends and the on-commit batches, flow events; a flow's start record goes before its first event
on the replication stream, so that event's WAIT covers it). A worker's outcomes do not: an ack
lost in a failover makes its task run again, as at-least-once delivery allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.cluster import ClusterNode
from redis.exceptions import NoScriptError, ResponseError

from django_jobs.broker.cluster import command_slot
from django_jobs.broker.connection import ScriptCalls, refused
from django_jobs.exceptions import ReplicaAckTimeout


def wait_command(acks: int, timeout: float) -> tuple[str, int, int]:
    """WAIT for `acks` replicas, `timeout` seconds at most (0 ms would mean for ever)."""
    return ("WAIT", acks, max(1, round(timeout * 1000)))


def _waits(broker: ScriptCalls, commands: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The WAIT to send after `commands`: one on a single server; on a Cluster one to each node
    that `commands` go to, by the slot map as it is (see cluster.ClusterWire.round_trip)."""
    settings = broker.settings
    wait = wait_command(settings.replica_acks, settings.replica_acks_timeout)
    if broker.wire is None:
        return [wait]
    nodes: dict[str, ClusterNode] = {}
    for command in commands:
        node = broker.wire.node(command_slot(command))
        nodes.setdefault(node.name, node)
    return [(node, *wait) for node in nodes.values()]


def _targets(broker: ScriptCalls, commands: Sequence[tuple[Any, ...]]) -> list[str]:
    """The node each command goes to by the slot map as it is (none on a single server)."""
    if broker.wire is None:
        return []
    return [str(broker.wire.node(command_slot(command)).name) for command in commands]


def replicated(
    broker: ScriptCalls, calls: Sequence[tuple[str, list[str], list[Any]]], *, errors: bool
) -> list[Any]:
    """Run enqueue script calls, then WAIT, in one round trip; the scripts' replies as bytes.

    errors: return the scripts' error replies in their place (else raise the first). When a
    script did not run (its reply is an error), nothing is waited for: the caller reports the
    refusal. Raises ReplicaAckTimeout when fewer replicas than JOBS["REPLICA_ACKS"] confirmed.

    On a Cluster a WAIT goes to each node the scripts go to, after them on the same connection.
    A script that a MOVED sent on to another node ran after that node's WAIT, if any: the map
    has changed for that script then (even when the nodes written to stay the same), and it is
    all sent again once (an enqueue runs twice safely). An ASK (a slot being moved) does not
    land an enqueue on the importing node: it answers TRYAGAIN to a script naming a key it
    does not hold (the new task's record) until the move ends, and then the source's MOVED is
    that case (tests/cluster_leg/test_cluster_replica_acks.py).
    """
    settings = broker.settings
    commands: list[tuple[Any, ...]] = [
        ("EVALSHA", broker.scripts[name].sha, len(keys), *keys, *args) for name, keys, args in calls
    ]
    for attempt in (1, 2, 3):
        waits = _waits(broker, commands)
        targets = _targets(broker, commands)
        replies = broker._round_trip([*commands, *waits], own=False)
        acked = replies[len(commands) :]
        del replies[len(commands) :]
        forgotten = {calls[i][0] for i, r in enumerate(replies) if isinstance(r, NoScriptError)}
        if forgotten and attempt < 3:
            # Redis forgot scripts (a restart, SCRIPT FLUSH): load them and send it all again,
            # so that WAIT still follows every write on its connection.
            for name in forgotten:
                broker.client.script_load(broker.scripts[name].script)
            continue
        if targets == _targets(broker, commands) or attempt == 3:
            break
    failed = [reply for reply in replies if isinstance(reply, ResponseError)]
    if failed:
        if not errors:
            raise failed[0]
        return replies
    for reply in acked:
        if isinstance(reply, ResponseError):
            raise refused(broker.url, reply, outcome="the tasks may have been enqueued")
    confirmed = min(int(reply) for reply in acked)
    if confirmed < settings.replica_acks:
        raise ReplicaAckTimeout(
            f"Redis at {broker.url} took the enqueue, but only {confirmed} of the "
            f"{settings.replica_acks} replicas JOBS['REPLICA_ACKS'] asks for confirmed it within "
            f"{settings.replica_acks_timeout:g}s (JOBS['REPLICA_ACKS_TIMEOUT']): the tasks are on "
            f"the primary and run unless it fails before a replica has them. Check the replicas "
            f"(INFO replication on the primary), or lower REPLICA_ACKS to what they can answer; "
            f"retry only with an idempotency key (else it makes second tasks).",
            acked=confirmed,
            wanted=settings.replica_acks,
        )
    return replies
