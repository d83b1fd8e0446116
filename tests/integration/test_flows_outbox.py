"""Flows under the outbox: a start and a signal travel in their event's row (a rollback drops
them, Redis down at the call keeps them), and the worker records them."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import transaction

from django_jobs.broker.factory import get_broker
from django_jobs.conf import get_settings
from django_jobs.flows import cancel, get_run, send_signal
from django_jobs.models import OutboxJob
from django_jobs.testing import run_burst
from django_jobs.worker.relay import Relay
from testproject.shop.flows import Steps, StepsFlow, Wait, WaitFlow
from tests.conftest import RedisNamespace, RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


def drain() -> None:
    for _ in range(3):  # a start, a wake-up, the replay it publishes
        run_burst(list(get_settings().flow_queues))


@pytest.fixture
def outbox(redis_ns: RedisNamespace, settings: Any) -> RedisNamespace:
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    return redis_ns


@pytest.fixture
def down(private_redis: RedisServer, settings: Any) -> RedisServer:
    """Flows on a private Redis, with the outbox on; the test stops and starts it."""
    settings.JOBS = {"REDIS_URL": private_redis.url, "OUTBOX": True, "ENQUEUE_TIMEOUT": 1}
    return private_redis


def relay() -> None:
    """A worker's relay tick that takes rows at once (no fast-path grace)."""
    Relay(get_broker(), "test-relay", fresh=0.0).relay("default")
    assert not OutboxJob.objects.exists()


def test_start__rolled_back_leaves_no_run_and_no_row(outbox: RedisNamespace) -> None:
    with transaction.atomic():
        call = StepsFlow.start(Steps(n=1))
        transaction.set_rollback(True)
    drain()
    assert not OutboxJob.objects.exists()
    assert get_run(call) is None  # red before: a run "running" for ever, with no event


def test_start__committed_is_recorded_by_the_worker(outbox: RedisNamespace) -> None:
    with transaction.atomic():
        call = StepsFlow.start(Steps(n=2), metadata={"order": 7})
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert run.metadata == {"order": 7}
    assert run.input["n"] == 2


@pytest.mark.parametrize("on_commit", [False, True])
def test_start__redis_down_writes_the_row_and_the_relay_starts_it(
    down: RedisServer, settings: Any, on_commit: bool
) -> None:
    settings.JOBS = {**settings.JOBS, "ENQUEUE_ON_COMMIT": on_commit}
    down.stop()
    with transaction.atomic():
        call = StepsFlow.start(Steps(n=1))  # red before: BrokerUnavailable (or at the commit)
    assert OutboxJob.objects.count() == 1
    down.start()
    relay()
    drain()
    assert get_run(call).status == "succeeded"  # type: ignore[union-attr]


def test_start__a_duplicate_key_is_found_and_logged_by_the_worker(
    outbox: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    first = StepsFlow.start(Steps(n=1), idempotency_key="order-1")
    with transaction.atomic():
        second = StepsFlow.start(Steps(n=1), idempotency_key="order-1")
    assert second != first  # found late: start() answered at once
    with caplog.at_level(logging.INFO, "django_jobs.flows"):
        drain()
    assert get_run(first).status == "succeeded"  # type: ignore[union-attr]
    assert get_run(second) is None
    assert f"holds call {first}: not started" in caplog.text


def test_signal__rolled_back_is_not_delivered_and_a_later_one_wakes(
    outbox: RedisNamespace,
) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert get_run(call).status == "waiting"  # type: ignore[union-attr]
    with transaction.atomic():
        assert send_signal(call, "go", 1) is True  # written for delivery
        transaction.set_rollback(True)
    drain()
    assert get_run(call).status == "waiting"  # type: ignore[union-attr]
    with transaction.atomic():
        assert send_signal(call, "go", 2) is True  # red before: False, the first was stored
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert run.output == {"value": 2, "received": True}


def test_signal__redis_down_writes_the_row_and_the_relay_delivers_it(down: RedisServer) -> None:
    call = WaitFlow.start(Wait())
    relay()
    drain()
    down.client().save()  # the waiting run survives the outage (dump.rdb in its directory)
    down.stop()
    with transaction.atomic():
        assert send_signal(call, "go", 3) is True  # red before: BrokerUnavailable
    assert OutboxJob.objects.count() == 1
    down.start()
    relay()
    drain()
    assert get_run(call).output == {"value": 3, "received": True}  # type: ignore[union-attr]


def test_signal__outside_atomic_is_delivered_now_and_answered(outbox: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert send_signal(call, "go", 1) is True
    assert send_signal(call, "go", 2) is False  # the first won: answered as taken or not
    assert send_signal("no-such-call", "go", 1) is False
    drain()
    assert get_run(call).output == {"value": 1, "received": True}  # type: ignore[union-attr]


def test_start__outside_atomic_is_recorded_at_once(outbox: RedisNamespace) -> None:
    """A signal or cancel() right after a start finds the run (review: under the outbox the
    run came to exist only when a worker took the start, so both were lost)."""
    call = WaitFlow.start(Wait())
    assert get_run(call) is not None
    assert send_signal(call, "go", 5) is True
    drain()
    assert get_run(call).status == "succeeded"  # type: ignore[union-attr]
    other = WaitFlow.start(Wait())
    assert cancel(other, "no longer wanted") is True
    drain()
    assert get_run(other).status == "canceled"  # type: ignore[union-attr]


def test_start__inside_atomic_is_recorded_after_the_commit_and_its_signal_waits(
    outbox: RedisNamespace,
) -> None:
    with transaction.atomic():
        call = WaitFlow.start(Wait())
        assert send_signal(call, "go", 5) is True  # travels in its row: delivered by a worker
    assert get_run(call) is not None  # recorded right after the commit
    drain()
    assert get_run(call).status == "succeeded"  # type: ignore[union-attr]


def test_signal__for_a_start_still_on_its_way_is_put_back_not_dropped(
    outbox: RedisNamespace,
) -> None:
    """A signal event handled before its call's start (the start's queue drains last) waits."""
    from django_jobs.flows.events import publish

    publish("early-call", "", signal={"name": "go", "value": 5})
    run_burst([get_settings().flow_queues[0]])
    (queued,) = get_broker().queue_infos([get_settings().flow_queues[0]])
    assert queued.scheduled + queued.pending == 1  # put back, not completed and dropped
