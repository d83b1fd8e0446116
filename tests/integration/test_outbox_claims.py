"""The fast path and the relay never both send one row (issue 15).

A row is past the relay's grace as soon as its transaction lasted longer than the grace after
the enqueue: the relay may take it before its own fast path runs, or while it runs. With
retention=0 a task that completed between two sends runs again, so these count runs. The
relays here take rows at once (fresh=0), as after a request that lasted over a second.
Real transactions on SQLite or PostgreSQL as DATABASE_URL says, a relay in a thread of its own
(its own connection) where the two must overlap.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from django.db import connection, connections, transaction

from django_jobs import Job
from django_jobs.backends import outbox
from django_jobs.client import get_broker
from django_jobs.models import OutboxJob
from django_jobs.testing import run_burst
from django_jobs.worker.relay import Relay
from tests.conftest import RedisNamespace, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: Every run of Forget, in this process (run_burst runs here).
RUNS: list[str] = []


@dataclass(frozen=True)
class Tag:
    tag: str


class Forget(Job[Tag]):
    """Keeps no record once done: a second send after its run would run it again."""

    retention = 0

    def run(self, payload: Tag) -> None:
        RUNS.append(payload.tag)


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    RUNS.clear()


def test_outbox_claims__a_relay_ahead_of_the_fast_path_sends_the_row_alone(
    redis_ns: RedisNamespace,
) -> None:
    relay = Relay(get_broker(), "other-worker", fresh=0.0)
    with transaction.atomic():
        # Another worker's relay tick, and a worker running the task, between this commit and
        # this process's fast path (an earlier on_commit callback of the same transaction).
        transaction.on_commit(lambda: (relay.relay(connection.alias), run_burst()))
        handle = Forget.enqueue(Tag("x"), outbox=True)

    run_burst()
    assert RUNS == ["x"]
    assert handle.state == outbox.OUTBOXED  # the relay's row: the fast path left it
    assert not OutboxJob.objects.exists()


def test_outbox_claims__the_fast_path_leaves_a_row_the_relay_is_sending(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, go = threading.Event(), threading.Event()
    real_send = outbox.send_rows

    def paused_send(rows: Sequence[OutboxJob], using: str) -> outbox.Relayed:
        inside.set()
        go.wait(10)
        return real_send(rows, using)

    monkeypatch.setattr(outbox, "send_rows", paused_send)
    relay = Relay(get_broker(), "other-worker", fresh=0.0)

    def relay_tick() -> None:
        try:
            relay.relay(connection.alias)
        finally:
            connections.close_all()

    thread = threading.Thread(target=relay_tick)
    try:
        with transaction.atomic():
            # The relay takes the committed row and is sending it when the fast path runs.
            transaction.on_commit(lambda: (thread.start(), wait_until(inside.is_set)))
            handle = Forget.enqueue(Tag("x"), outbox=True)

        assert thread.is_alive()  # still sending: the fast path did not wait for the relay
        assert not go.is_set()
        assert handle.state == outbox.OUTBOXED
        run_burst()  # nothing yet: the fast path sent nothing
        assert RUNS == []
    finally:
        go.set()
        thread.join(10)
    run_burst()
    assert RUNS == ["x"]
    assert not OutboxJob.objects.exists()
