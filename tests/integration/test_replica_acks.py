"""JOBS["REPLICA_ACKS"] (issue 20): an enqueue returns only once that many replicas have its
tasks (Redis WAIT, in the enqueue's own round trip), or raises ReplicaAckTimeout.

The replica follows its primary LAG seconds behind (tests/sentinel.py's lagging link), so that a
replica "having" a task right after the enqueue returned is the WAIT's doing, not luck.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection, transaction

from django_jobs import BrokerUnavailable, Job, ReplicaAckTimeout
from django_jobs.backends import outbox
from django_jobs.client import get_broker
from django_jobs.models import OutboxJob
from tests.conftest import RedisServer
from tests.sentinel import ReplicaPair, redis_server

#: Seconds the replica lags behind its primary.
LAG = 0.3


@dataclass(frozen=True)
class Note:
    text: str


class Keep(Job[Note]):
    def run(self, payload: Note) -> None:
        pass


def record(client: redis.Redis, handle: Any) -> bytes | None:
    """The state field of a task's record on the server `client` talks to."""
    namespace = get_broker().settings.namespace
    state: bytes | None = client.hget(f"{namespace}:{{{handle.queue}}}:t:{handle.id}", "state")
    return state


@pytest.fixture
def acks(tmp_path: Path, settings: Any) -> Iterator[ReplicaPair]:
    """A primary and its replica LAG seconds behind; jobs on the primary, REPLICA_ACKS = 1."""
    pair = ReplicaPair(redis_server(), tmp_path / "pair", LAG)
    try:
        pair.start()
        settings.JOBS = {
            "REDIS_URL": f"redis://127.0.0.1:{pair.primary.port}/0",
            "REPLICA_ACKS": 1,
            "REPLICA_ACKS_TIMEOUT": 2,
        }
        yield pair
    finally:
        pair.stop()


@pytest.mark.parametrize(
    "enqueue",
    [
        pytest.param(lambda: [Keep.enqueue(Note("one"))], id="one"),
        pytest.param(lambda: [Keep.enqueue(Note("keyed"), idempotency_key="k")], id="keyed"),
        pytest.param(  # its key in its job type's home queue, the task on another (a hand-off)
            lambda: [Keep.enqueue(Note("moved"), queue="low", idempotency_key="k")], id="handed-off"
        ),
        pytest.param(lambda: Keep.enqueue_many([Note("a"), Note("b"), Note("c")]), id="many"),
    ],
)
def test_enqueue__with_replica_acks_returns_once_the_replica_has_the_tasks(
    acks: ReplicaPair, enqueue: Any
) -> None:
    # When tasks are enqueued with REPLICA_ACKS = 1
    handles = enqueue()

    # Then the replica has every one of them as the enqueue returns
    replica = acks.replica.client()
    assert [record(replica, handle) for handle in handles] == [b"pending"] * len(handles)


def test_enqueue__without_replica_acks_returns_before_the_replica_has_the_task(
    acks: ReplicaPair, settings: Any
) -> None:
    # Given REPLICA_ACKS off (the default): what the test above rules out does happen
    settings.JOBS = {**settings.JOBS, "REPLICA_ACKS": 0}

    handle = Keep.enqueue(Note("fast"))

    assert record(acks.primary.client(), handle) == b"pending"
    assert record(acks.replica.client(), handle) is None


@pytest.mark.parametrize("many", [False, True], ids=["one", "many"])
def test_enqueue__with_replica_acks_is_one_round_trip(
    acks: ReplicaPair, many: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a broker that has loaded its scripts
    Keep.enqueue(Note("warm"))
    Keep.enqueue_many([Note("warm"), Note("up")])
    connection_class = get_broker().client.connection_pool.connection_class
    sends = []
    real = connection_class.send_packed_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        sends.append(args)
        real(self, *args, **kwargs)

    monkeypatch.setattr(connection_class, "send_packed_command", counted)

    # When a task (or a batch) is enqueued
    if many:
        Keep.enqueue_many([Note("a"), Note("b")])
    else:
        Keep.enqueue(Note("a"))

    # Then the script call and the WAIT went out in one write
    assert len(sends) == 1


def test_enqueue__replica_not_answering_raises_replica_ack_timeout(
    acks: ReplicaPair, settings: Any
) -> None:
    # Given a replica that stopped answering (frozen), and a short wait for it
    settings.JOBS = {**settings.JOBS, "REPLICA_ACKS_TIMEOUT": 0.3}
    Keep.enqueue(Note("warm"))
    acks.replica.freeze()
    try:
        # When a task is enqueued
        with pytest.raises(ReplicaAckTimeout) as raised:
            Keep.enqueue(Note("unconfirmed"))
    finally:
        acks.replica.thaw()

    # Then the error says how many replicas confirmed, and what to do; it is a
    # BrokerUnavailable ("may have been applied"), and the task is indeed on the primary
    error = raised.value
    assert isinstance(error, BrokerUnavailable)
    assert (error.acked, error.wanted) == (0, 1)
    message = str(error)
    assert "only 0 of the 1 replicas JOBS['REPLICA_ACKS'] asks for" in message
    assert "INFO replication" in message
    assert "idempotency key" in message
    namespace = get_broker().settings.namespace
    primary = acks.primary.client()
    tasks = list(primary.scan_iter(f"{namespace}:{{default}}:t:*"))
    assert len(tasks) == 2


@pytest.mark.django_db(transaction=True)
def test_outbox__a_row_unconfirmed_by_the_replica_is_kept_and_sent_again(
    acks: ReplicaPair, settings: Any
) -> None:
    # Given the outbox, and a replica that stopped answering
    settings.JOBS = {**settings.JOBS, "OUTBOX": True, "REPLICA_ACKS_TIMEOUT": 0.3}
    acks.replica.freeze()
    try:
        # When a task is enqueued outside a transaction: its row commits, its send is not
        # confirmed by the replica
        handle = Keep.enqueue(Note("kept"))
    finally:
        acks.replica.thaw()

    # Then the row stays (the caller is not told of an error: the outbox has the task)...
    assert handle.state == "outboxed"
    rows = list(OutboxJob.objects.all())
    assert [row.job_id for row in rows] == [handle.id]

    # ...and the relay's send, once the replica answers, is confirmed and removes it (the
    # thawed replica may take a while to reconnect on a loaded machine: WAIT returns as soon as
    # it confirms, so a longer timeout costs nothing when it is quick)
    settings.JOBS = {**settings.JOBS, "REPLICA_ACKS_TIMEOUT": 2}
    assert outbox.send_rows(rows, connection.alias).sent == 1
    assert record(acks.replica.client(), handle) == b"pending"
    assert not OutboxJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_enqueue__on_commit_batch_waits_for_the_replica(acks: ReplicaPair) -> None:
    # When tasks are enqueued inside a transaction, to be sent at its commit
    with transaction.atomic():
        handles = [Keep.enqueue(Note(str(n)), on_commit=True) for n in range(3)]

    # Then once the commit returns, the replica has them
    replica = acks.replica.client()
    assert [record(replica, handle) for handle in handles] == [b"pending"] * 3


def test_enqueue__with_replica_acks_and_no_replica_at_all_raises(
    private_redis: RedisServer, settings: Any
) -> None:
    # Given REPLICA_ACKS on a Redis that has no replica
    settings.JOBS = {
        "REDIS_URL": private_redis.url,
        "REPLICA_ACKS": 1,
        "REPLICA_ACKS_TIMEOUT": 0.2,
    }

    # Then every enqueue says so
    with pytest.raises(ReplicaAckTimeout, match="only 0 of the 1 replicas"):
        Keep.enqueue(Note("alone"))
