"""Enqueue on commit: JOBS["ENQUEUE_ON_COMMIT"], one batch per transaction, savepoints, errors.

Real transactions (transaction=True): on SQLite and on PostgreSQL, as DATABASE_URL says.
"""

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction

from django_jobs import Job
from tests.conftest import RedisNamespace, RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Note:
    text: str


class Remember(Job[Note]):
    def run(self, payload: Note) -> None:
        pass


class Boom(Exception):
    pass


@pytest.fixture
def on_commit(redis_ns: RedisNamespace, settings: Any) -> RedisNamespace:
    settings.JOBS = {**settings.JOBS, "ENQUEUE_ON_COMMIT": True}
    return redis_ns


def _enqueue_and_raise(*texts: str) -> None:
    """Enqueue inside atomic() (a savepoint when nested), then fail it."""
    with transaction.atomic():
        Remember.enqueue_many([Note(text) for text in texts])
        raise Boom


def _texts(ns: RedisNamespace) -> list[str]:
    """The payload texts of the tasks in Redis, in enqueue order."""
    pending = ns.client.lrange(f"{ns.namespace}:{{default}}:pending", 0, -1)
    found = []
    for task_id in reversed(pending):  # LPUSH: the newest first
        raw = ns.client.hget(f"{ns.namespace}:{{default}}:t:{task_id.decode()}", "msg")
        found.append(raw.decode().split('"text":"')[1].split('"')[0])
    return found


def test_enqueue_on_commit__setting_defers_inside_atomic_only(on_commit: RedisNamespace) -> None:
    outside = Remember.enqueue(Note("outside"))
    with transaction.atomic():
        inside = Remember.enqueue(Note("inside"))
        assert inside.state == "deferred"
        assert inside.id  # the id at once
        assert _texts(on_commit) == ["outside"]
        now = Remember.enqueue(Note("now"), on_commit=False)

    assert outside.state == now.state == "pending"
    assert inside.state == "pending"  # the handle learns its state at commit
    assert _texts(on_commit) == ["outside", "now", "inside"]
    assert inside.refresh() == "pending"


def test_enqueue_on_commit__rollback_enqueues_nothing(on_commit: RedisNamespace) -> None:
    with transaction.atomic():
        handles = [Remember.enqueue(Note(f"n{i}")) for i in range(100)]
        transaction.set_rollback(True)
    with pytest.raises(Boom):
        _enqueue_and_raise("a", "b")

    assert [h.state for h in handles] == ["deferred"] * 100
    assert on_commit.keys() == []


def test_enqueue_on_commit__a_rolled_back_savepoint_drops_only_its_enqueues(
    on_commit: RedisNamespace,
) -> None:
    with transaction.atomic():
        with pytest.raises(Boom):
            _enqueue_and_raise("first, rolled back")
        Remember.enqueue(Note("kept 1"))
        with transaction.atomic():
            Remember.enqueue(Note("kept 2 (savepoint released)"))
        with transaction.atomic():
            Remember.enqueue(Note("middle, rolled back"))
            with transaction.atomic():
                Remember.enqueue(Note("nested in it, rolled back"))
            transaction.set_rollback(True)
        Remember.enqueue(Note("kept 3"))
        with pytest.raises(Boom):
            _enqueue_and_raise("last, rolled back")

    assert _texts(on_commit) == ["kept 1", "kept 2 (savepoint released)", "kept 3"]


def test_enqueue_on_commit__a_hundred_cost_one_round_trip(
    private_redis: RedisServer, settings: Any
) -> None:
    settings.JOBS = {"REDIS_URL": private_redis.url, "ENQUEUE_ON_COMMIT": True}
    Remember.enqueue_many([Note("warm"), Note("up")])  # connects, loads the script
    probe = private_redis.client()
    before = _calls(probe)

    with transaction.atomic():
        for i in range(100):
            Remember.enqueue(Note(f"n{i}"))
        waiting = _calls(probe)

    assert _delta(before, waiting) == {}
    sent = _delta(before, _calls(probe))
    # What the client sends is EVALSHA (SCRIPT LOAD or EVAL if the script were missing): one
    # call. The rest of the delta is the commands that call ran inside Redis (HSET per task...).
    assert {k: sent.get(k, 0) for k in CLIENT_COMMANDS} == {
        "cmdstat_evalsha": 1,
        "cmdstat_eval": 0,
        "cmdstat_script|load": 0,
    }
    assert sent["cmdstat_hset"] == 100
    assert probe.llen("jobs:{default}:pending") == 102


CLIENT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script|load")


def _calls(probe: Any) -> dict[str, int]:
    """Calls per command since the server started, INFO (the probe's own) left out."""
    stats = probe.info("commandstats")
    return {name: s["calls"] for name, s in stats.items() if name != "cmdstat_info"}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def test_enqueue_on_commit__duplicate_key_at_commit_is_logged_not_raised(
    on_commit: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    first = Remember.enqueue(Note("first"), idempotency_key="k")
    with caplog.at_level(logging.INFO, logger="django_jobs.client"), transaction.atomic():
        again = Remember.enqueue(Note("again"), idempotency_key="k")
        other = Remember.enqueue(Note("other"), idempotency_key="other")

    assert _texts(on_commit) == ["first", "other"]
    assert (again.state, other.state) == ("deferred", "pending")
    assert f"already accepted as job {first.id}" in caplog.text


def test_enqueue_on_commit__redis_down_at_commit_logs_the_lost_ids(
    private_redis: RedisServer, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.JOBS = {
        "REDIS_URL": private_redis.url,
        "ENQUEUE_ON_COMMIT": True,
        "ENQUEUE_TIMEOUT": 1,
    }
    with caplog.at_level(logging.ERROR, logger="django_jobs.client"), transaction.atomic():
        handles = Remember.enqueue_many([Note("a"), Note("b")])
        private_redis.stop()

    assert [h.state for h in handles] == ["deferred", "deferred"]
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "may be lost" in record.getMessage()
    assert all(h.id in record.getMessage() for h in handles)


@pytest.mark.django_db
def test_enqueue_on_commit__inside_a_test_transaction_with_captured_callbacks(
    on_commit: RedisNamespace, django_capture_on_commit_callbacks: Any
) -> None:
    # The test's own transaction never commits; Django's capture runs the callbacks instead.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        first = Remember.enqueue(Note("a"))
        with transaction.atomic():
            Remember.enqueue(Note("b"))
            transaction.set_rollback(True)
        Remember.enqueue(Note("c"))

    assert len(callbacks) == 2  # one per surviving enqueue; the first sent them all
    assert _texts(on_commit) == ["a", "c"]
    assert first.state == "pending"


def test_on_commit__outside_a_transaction_enqueues_now_and_raises_what_it_meets(
    redis_ns: RedisNamespace,
) -> None:
    # No transaction: it has committed already, so the enqueue happens now, and the caller
    # sees a duplicate (or Redis down) while it can still act on it, with a real handle.
    from django_jobs import DuplicateJob

    first = Remember.enqueue(Note("once"), idempotency_key="k", on_commit=True)
    with pytest.raises(DuplicateJob) as caught:
        Remember.enqueue(Note("twice"), idempotency_key="k", on_commit=True)

    assert first.state == "pending"
    assert caught.value.original_id == first.id
    assert _texts(redis_ns) == ["once"]


def test_on_commit__manual_transaction_management_is_refused(redis_ns: RedisNamespace) -> None:
    transaction.set_autocommit(False)
    try:
        with pytest.raises(transaction.TransactionManagementError):
            Remember.enqueue(Note("too early"), on_commit=True)
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)

    assert _texts(redis_ns) == []
