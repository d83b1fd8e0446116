"""JOBS["REPLICA_ACKS"]: an enqueue returns once that many replicas have its tasks (Redis WAIT).

Redis replicates asynchronously: the primary answers a write before any replica has it, so a
failover (the sentinels promoting a replica after the primary died) loses what the primary had
not sent yet. With REPLICA_ACKS = n the broker sends `WAIT n <timeout ms>` right after the
enqueue's script calls, on the same connection and in the same round trip. WAIT answers once n
replicas have every write this connection made (the scripts' included: they ran first), or when
JOBS["REPLICA_ACKS_TIMEOUT"] has passed, with how many did; fewer than n is ReplicaAckTimeout.
On a Redis Cluster every write of the call to a master carries a WAIT after its scripts, those
a redirection sends on included (`ClusterWire.round_trip`'s `then`).

Only enqueues wait (`RedisBroker.enqueue`: a single task, enqueue_many's batches, the outbox's
sends and the on-commit batches, flow events; a flow's start record goes before its first event
on the replication stream, so that event's WAIT covers it). A worker's outcomes do not: an ack
lost in a failover makes its task run again, as at-least-once delivery allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from django_jobs.broker.connection import ScriptCalls, refused
from django_jobs.exceptions import ReplicaAckTimeout


def wait_command(acks: int, timeout: float) -> tuple[str, int, int]:
    """WAIT for `acks` replicas, `timeout` seconds at most (0 ms would mean for ever)."""
    return ("WAIT", acks, max(1, round(timeout * 1000)))


def _send(
    broker: ScriptCalls, commands: Sequence[tuple[Any, ...]], wait: tuple[Any, ...]
) -> list[Any]:
    """commands, then WAIT, in one round trip: their replies, then the WAIT's (one on a single
    server; on a Cluster one per command, of the write it was answered in)."""
    if broker.wire is None:
        return broker._round_trip([*commands, wait], own=False)
    return broker.wire.round_trip(commands, own=False, then=wait)


def replicated(
    broker: ScriptCalls, calls: Sequence[tuple[str, list[str], list[Any]]], *, errors: bool
) -> list[Any]:
    """Run enqueue script calls, then WAIT, in one round trip; the scripts' replies as bytes.

    errors: return the scripts' error replies in their place (else raise the first). When a
    script did not run (its reply is an error), nothing is waited for: the caller reports the
    refusal. Raises ReplicaAckTimeout when fewer replicas than JOBS["REPLICA_ACKS"] confirmed.

    On a Cluster each write to a node ends with a WAIT, on the same connection: a script that
    a MOVED or an ASK sends on to another node has that node's WAIT after it, in the write that
    runs it. (An ASK never lands an enqueue: the importing node answers TRYAGAIN to a script
    naming a key it does not hold, the new task's record, until the move ends and the source
    answers MOVED: tests/cluster_leg/test_cluster_replica_acks.py.) Sending a script again
    after the write that ran it would not do: its replay writes nothing, and the WAIT of
    another pooled connection covers nothing of it.
    """
    settings = broker.settings
    wait = wait_command(settings.replica_acks, settings.replica_acks_timeout)
    commands: list[tuple[Any, ...]] = [
        ("EVALSHA", broker.scripts[name].sha, len(keys), *keys, *args) for name, keys, args in calls
    ]
    replies: list[Any] = [None] * len(commands)
    acked: list[Any] = []
    todo = list(range(len(commands)))
    for attempt in (1, 2, 3):
        got = _send(broker, [commands[i] for i in todo], wait)
        acked += got[len(todo) :]
        for index, reply in zip(todo, got, strict=False):
            replies[index] = reply
        todo = [i for i in todo if isinstance(replies[i], NoScriptError)]
        if not todo or attempt == 3:
            break
        # Redis forgot scripts (a restart, SCRIPT FLUSH; a Cluster node not sent them yet):
        # load them and send those calls again, a WAIT after them as after the others.
        for name in {calls[i][0] for i in todo}:
            broker.client.script_load(broker.scripts[name].script)
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
