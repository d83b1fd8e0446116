"""The transactional outbox: rows written in the enqueue's transaction, the fast path, the relay.

Real transactions (transaction=True) on SQLite or PostgreSQL as DATABASE_URL says, real Redis
(the shared one through redis_ns, or a private one to stop and start).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from django.utils import timezone

from django_jobs import DuplicateJob, Job
from django_jobs.backends import outbox
from django_jobs.broker.protocol import Accepted
from django_jobs.checks import check_outbox_relayed
from django_jobs.client import get_broker, use_outbox
from django_jobs.models import OutboxJob, OutboxRelay, ProcessedTask
from django_jobs.testing import run_burst
from django_jobs.worker.relay import Relay
from tests.conftest import RedisNamespace, RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

#: Every run of Count, in this process (run_burst runs here).
RUNS: list[str] = []


@dataclass(frozen=True)
class Tag:
    tag: str


class Count(Job[Tag]):
    def run(self, payload: Tag) -> None:
        RUNS.append(payload.tag)


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    RUNS.clear()


@pytest.fixture
def down(private_redis: RedisServer, settings: Any) -> RedisServer:
    """Jobs on a private Redis, with the outbox on; the test stops and starts it."""
    settings.JOBS = {"REDIS_URL": private_redis.url, "OUTBOX": True, "ENQUEUE_TIMEOUT": 1}
    return private_redis


def relay(worker: str = "test-relay") -> Relay:
    """A relay that takes rows at once (no fast-path grace)."""
    return Relay(get_broker(), worker, fresh=0.0)


def view(request: HttpRequest) -> HttpResponse:
    """A view of the kind the outbox is for: a row and its job in one transaction."""
    with transaction.atomic():
        ProcessedTask.objects.create(key=f"order:{request.GET['n']}")
        handle = Count.enqueue(Tag(request.GET["n"]))
    return HttpResponse(handle.state)


def test_outbox__view_with_redis_stopped_returns_and_the_job_runs_once_after_restart(
    down: RedisServer,
) -> None:
    Count.enqueue(Tag("warm"), outbox=False)  # the broker has connected once
    down.stop()

    response = view(RequestFactory().get("/", {"n": "1"}))

    assert response.status_code == 200
    assert response.content == b"outboxed"
    assert ProcessedTask.objects.filter(key="order:1").exists()
    assert list(OutboxJob.objects.values_list("job", flat=True)) == [Count.name]
    down.start()
    assert relay().relay(connection.alias) is False
    assert not OutboxJob.objects.exists()
    assert relay().relay(connection.alias) is False  # nothing left to send twice
    run_burst()
    assert RUNS == ["1"]  # "warm" went with the restarted Redis (no persistence)


def test_outbox__rollback_enqueues_nothing(redis_ns: RedisNamespace) -> None:
    with transaction.atomic():
        Count.enqueue(Tag("never"), outbox=True)
        assert OutboxJob.objects.count() == 1
        transaction.set_rollback(True)

    assert not OutboxJob.objects.exists()
    assert [k for k in redis_ns.keys() if ":t:" in k] == []
    assert run_burst() == []


def test_outbox__commit_sends_in_one_batch_and_deletes_the_rows(redis_ns: RedisNamespace) -> None:
    with transaction.atomic():
        handles = Count.enqueue_many([Tag("a"), Tag("b")], outbox=True)
        assert [h.state for h in handles] == ["outboxed", "outboxed"]

    assert [h.state for h in handles] == ["pending", "pending"]
    assert not OutboxJob.objects.exists()
    assert [o.task_id for o in run_burst()] == [h.id for h in handles]


def test_outbox__setting_and_block_turn_it_on(redis_ns: RedisNamespace, settings: Any) -> None:
    with transaction.atomic():
        plain = Count.enqueue(Tag("plain"))
        with use_outbox():
            blocked = Count.enqueue(Tag("block"))
        settings.JOBS = {**settings.JOBS, "OUTBOX": True}
        configured = Count.enqueue(Tag("setting"))
        assert [plain.state, blocked.state, configured.state] == [
            "pending",
            "outboxed",
            "outboxed",
        ]


def test_outbox__outside_a_transaction_redis_down_keeps_the_row(down: RedisServer) -> None:
    down.stop()

    handle = Count.enqueue(Tag("x"))

    assert handle.state == "outboxed"
    assert OutboxJob.objects.get().job_id == handle.id


def test_outbox__outside_a_transaction_a_duplicate_raises_and_leaves_no_row(
    redis_ns: RedisNamespace,
) -> None:
    first = Count.enqueue(Tag("x"), idempotency_key="k", outbox=True)

    with pytest.raises(DuplicateJob) as caught:
        Count.enqueue(Tag("x"), idempotency_key="k", outbox=True)

    assert caught.value.original_id == first.id
    assert not OutboxJob.objects.exists()


def test_outbox__duplicate_found_by_the_relay_is_logged_with_the_original_and_removed(
    down: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    first = Count.enqueue(Tag("x"), idempotency_key="k")
    down.stop()
    with transaction.atomic():
        Count.enqueue(Tag("x"), idempotency_key="k")  # no error: detected late
    down.start()
    # A restarted Redis without persistence lost the key: put it back as the first enqueue
    # left it (a Redis that stayed up but refused connections for a while keeps it).
    get_broker().client.set(get_broker().keys("default").idempotency(Count.name, "k"), first.id)

    with caplog.at_level(logging.INFO, logger="django_jobs.outbox"):
        relay().relay(connection.alias)

    assert not OutboxJob.objects.exists()
    assert any(first.id in r.getMessage() for r in caplog.records)


def test_outbox__sending_a_row_twice_leaves_one_task(redis_ns: RedisNamespace) -> None:
    """The enqueue script refuses an id it has written: with and without idempotency keys."""
    with transaction.atomic():
        Count.enqueue(Tag("plain"), outbox=True)
        Count.enqueue(Tag("keyed"), outbox=True, idempotency_key="once")
        rows = list(OutboxJob.objects.order_by("pk"))  # before the fast path deletes them

    assert outbox.send_rows(rows, connection.alias).sent == 2  # the relay, after the fast path
    assert outbox.send_rows(rows, connection.alias).sent == 2
    assert len(run_burst()) == 2
    assert sorted(RUNS) == ["keyed", "plain"]


@pytest.fixture
def no_fast_path() -> Iterator[None]:
    """Rows are written, and nothing sends them after the commit (as if the process died)."""
    outbox._backends[connection.alias] = _NoFastPath()  # type: ignore[assignment]
    yield
    outbox._backends.clear()


class _NoFastPath:
    def submit(self, submissions: Any) -> list[Accepted]:
        return [Accepted(outbox.OUTBOXED)] * len(submissions)


def test_outbox__held_rows_count_attempts_and_do_not_block(
    redis_ns: RedisNamespace, no_fast_path: None, caplog: pytest.LogCaptureFixture
) -> None:
    bad = Count.enqueue(Tag("bad"), outbox=True, queue="low")
    good = Count.enqueue(Tag("good"), outbox=True)
    # A row as a web process with another JOBS["QUEUES"] wrote it: a queue this worker lacks.
    OutboxJob.objects.filter(job_id=bad.id).update(queue="gone")

    with caplog.at_level(logging.WARNING, logger="django_jobs.outbox"):
        relay().relay(connection.alias)

    held = OutboxJob.objects.get()
    assert held.job_id == bad.id
    assert held.attempts == 1
    assert "'gone' is not in JOBS['QUEUES']" in held.last_error
    assert held.retry_at is not None
    assert held.retry_at > timezone.now()
    assert "delete the row" in caplog.text
    assert [o.task_id for o in run_burst()] == [good.id]
    relay().relay(connection.alias)  # not due again yet
    assert OutboxJob.objects.get().attempts == 1


def test_outbox__a_delay_counts_from_the_enqueue_not_from_the_relay(
    redis_ns: RedisNamespace, no_fast_path: None
) -> None:
    Count.enqueue(Tag("later"), outbox=True, delay=60)
    OutboxJob.objects.update(created_at=timezone.now() - timedelta(seconds=3600))

    relay().relay(connection.alias)

    run_burst()
    assert RUNS == ["later"]  # overdue: it was due an hour ago plus a minute


def test_outbox__relay_writes_the_heartbeat_and_the_check_reads_it(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    assert [w.id for w in check_outbox_relayed(databases=["default"])] == [
        "django_jobs.W002"
    ]  # never relayed

    relay("w-1").relay(connection.alias)

    beat = OutboxRelay.objects.get()
    assert beat.worker == "w-1"
    assert check_outbox_relayed(databases=["default"]) == []
    OutboxRelay.objects.update(relayed_at=timezone.now() - timedelta(minutes=10))
    (warning,) = check_outbox_relayed(databases=["default"])
    assert "w-1" in warning.msg
    settings.JOBS = {**settings.JOBS, "OUTBOX": False}
    assert check_outbox_relayed(databases=["default"]) == []


@pytest.mark.skipif(
    connection.vendor == "postgresql", reason="PostgreSQL relays by row locks, not the lease"
)
def test_outbox__on_sqlite_one_relay_at_a_time(
    redis_ns: RedisNamespace, no_fast_path: None
) -> None:
    Count.enqueue(Tag("one"), outbox=True)
    first, second = relay("w-1"), relay("w-2")
    OutboxRelay.objects.create(holder="w-1", lease_until=timezone.now() + timedelta(seconds=9))

    second.relay(connection.alias)
    assert OutboxJob.objects.count() == 1  # w-1 holds the lease
    first.relay(connection.alias)
    assert not OutboxJob.objects.exists()
    OutboxRelay.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
    assert second._lease(connection.alias)  # expired: taken over


def test_outbox__a_row_of_an_unknown_job_is_held(
    redis_ns: RedisNamespace, no_fast_path: None
) -> None:
    handle = Count.enqueue(Tag("new code"), outbox=True)
    # Written by a web process already running a deploy that this worker has not had yet.
    OutboxJob.objects.update(job="shop.NotDeployedYet")

    relay().relay(connection.alias)

    held = OutboxJob.objects.get()
    assert held.job_id == handle.id
    assert held.attempts == 1
    assert "'shop.NotDeployedYet' is unknown to worker test-relay" in held.last_error
    assert run_burst() == []


def test_outbox__a_failing_database_is_logged_once_and_its_recovery_too(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from django.db import OperationalError

    worker, real = relay(), Relay.relay
    answers = iter([OperationalError("no such table: django_jobs_outboxjob")] * 2)

    def flaky(self: Relay, alias: str) -> bool:
        failure = next(answers, None)
        if failure is not None:
            raise failure
        return real(self, alias)

    monkeypatch.setattr(Relay, "relay", flaky)
    with caplog.at_level(logging.INFO, logger="django_jobs.worker.relay"):
        for _ in range(3):
            worker.tick()

    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "failed" in line]) == 1
    assert "is `manage.py migrate` done?" in lines[0]
    assert lines[-1] == "relaying the outbox of database 'default' works again"


def test_outbox__after_redis_failed_the_fast_path_leaves_new_jobs_to_the_relay_for_a_while(
    down: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    down.stop()
    assert Count.enqueue(Tag("a")).state == "outboxed"
    down.start()

    assert Count.enqueue(Tag("b")).state == "outboxed"  # not tried: no request waits it out
    monkeypatch.setattr(outbox, "clock", lambda: float("inf"))
    assert Count.enqueue(Tag("c")).state == "pending"  # tried again after the pause
    assert OutboxJob.objects.count() == 2


def test_outbox__rows_on_the_flows_queues_are_relayed(
    redis_ns: RedisNamespace, no_fast_path: None
) -> None:
    """Flows enqueue their events through client.enqueue, so with the outbox on they are rows
    too, on the flows' queue pair rather than JOBS["QUEUES"]."""
    critical, start = get_broker().settings.flow_queues
    handles = [Count.enqueue(Tag(q), outbox=True, queue=q) for q in (critical, start)]

    relay().relay(connection.alias)

    assert not OutboxJob.objects.exists()
    assert [get_broker().task_state(h.queue, h.id) for h in handles] == ["pending", "pending"]


@pytest.mark.skipif(
    connection.vendor == "postgresql", reason="PostgreSQL relays by row locks, not the lease"
)
def test_outbox__a_relay_stopping_gives_back_the_sqlite_lease(
    redis_ns: RedisNamespace, no_fast_path: None
) -> None:
    first, second = relay("w-1"), relay("w-2")
    first.relay(connection.alias)  # takes the lease
    assert OutboxRelay.objects.get().holder == "w-1"

    first.stop()

    assert OutboxRelay.objects.get().holder == ""
    assert second._lease(connection.alias)  # at once, not LEASE seconds later
    first.stop()  # not the holder: changes nothing
    assert OutboxRelay.objects.get().holder == "w-2"


def test_outbox__a_cluster_slot_on_the_move_is_tried_again_soon_without_an_attempt(
    redis_ns: RedisNamespace, no_fast_path: None, caplog: pytest.LogCaptureFixture
) -> None:
    """TRYAGAIN after the call's budget: the call did not run, and a slot moves in seconds. The
    rows are not held with a growing backoff and an attempt counted, as for a refusal: they are
    due again FIRST_HOLD later, and the rest of that queue's rows are not tried one by one (each
    try would wait out the whole budget again); the other queues' rows are sent."""
    from tests.integration.test_enqueue_resend import MovingWire

    moving = [Count.enqueue(Tag(f"m{n}"), outbox=True) for n in range(3)]
    other = Count.enqueue(Tag("low"), outbox=True, queue="low")
    broker = get_broker()
    raw = redis.Redis.from_url(broker.settings.redis_url or "")  # replies as bytes, as the wire's
    calls: list[str] = []

    class OneQueueMoving(MovingWire):
        def round_trip(self, commands: Any, *, own: bool, replayable: bool = True) -> list[Any]:
            calls.append(str(commands))
            if "{default}" in str(commands):
                return super().round_trip(commands, own=own, replayable=replayable)
            return [raw.execute_command(*c) for c in commands]

    broker.wire = OneQueueMoving()  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.WARNING, logger="django_jobs.outbox"):
            relay().relay(connection.alias)
    finally:
        broker.wire = None
    rows = list(OutboxJob.objects.order_by("pk"))
    assert [row.job_id for row in rows] == [h.id for h in moving]
    assert {(row.attempts, row.last_error) for row in rows} == {(0, "")}
    soon = timezone.now() + timedelta(seconds=outbox.FIRST_HOLD)
    assert all(timezone.now() < row.retry_at <= soon for row in rows if row.retry_at)
    assert len([c for c in calls if "{default}" in c]) == 2  # the batch, then the first row alone
    assert "sent again in 5s" in caplog.text

    OutboxJob.objects.update(retry_at=timezone.now())  # FIRST_HOLD later: the slot has moved
    relay().relay(connection.alias)
    assert not OutboxJob.objects.exists()
    assert sorted(o.task_id for o in run_burst()) == sorted([other.id] + [h.id for h in moving])
