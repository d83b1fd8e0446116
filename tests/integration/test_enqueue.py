"""Enqueue as a user calls it: validation before anything is written, defaults, errors."""

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction

from django_jobs import (
    BrokerUnavailable,
    InvalidPayload,
    Job,
    JobsDisabled,
    PayloadTooLarge,
    UnknownQueue,
)
from django_jobs.client import get_broker
from django_jobs.message import decode
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace, RedisServer, free_port

ran: list[Any] = []


@dataclass(frozen=True)
class Mail:
    to: str
    data: dict[str, Any] = field(default_factory=dict)
    tags: Any = None


class SendMail(Job[Mail]):
    queue = "critical"
    timeout = timedelta(seconds=30)

    def run(self, payload: Mail) -> None:
        if payload.to == "fail":
            raise RuntimeError("mail server said no")
        ran.append(payload.to)


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


def _records(ns: RedisNamespace) -> list[str]:
    return [key for key in ns.keys() if ":t:" in key]


def test_enqueue__returns_handle_and_writes_the_message(redis_ns: RedisNamespace) -> None:
    handle = SendMail.enqueue(Mail("a@example.com", {"n": 1}), max_attempts=3)

    record = redis_ns.client.hgetall(f"{redis_ns.namespace}:{{critical}}:t:{handle.id}")
    message = decode(record[b"msg"], handle.id, "critical")
    assert (handle.job, handle.queue, handle.state) == (SendMail.name, "critical", "pending")
    assert SendMail.name == "tests.integration.test_enqueue.SendMail"
    assert message.payload == {"to": "a@example.com", "data": {"n": 1}, "tags": None}
    assert (message.max_attempts, message.timeout, message.retention) == (3, 30.0, 86400.0)
    assert handle.refresh() == "pending"
    run_burst()
    assert handle.refresh() == "completed"


@pytest.mark.parametrize(
    ("payload", "field_named"),
    [
        (Mail("a", tags=(1, 2)), "Mail.tags"),
        (Mail("a", tags=datetime.now(UTC)), "Mail.tags"),
        (Mail("a", data={1: "int key"}), "Mail.data"),
        (Mail("a", tags=float("nan")), "Mail.tags"),
    ],
)
def test_enqueue__payload_that_does_not_survive_json_is_refused(
    redis_ns: RedisNamespace, payload: Mail, field_named: str
) -> None:
    with pytest.raises(InvalidPayload, match=field_named) as info:
        SendMail.enqueue(payload)
    assert isinstance(info.value, TypeError)
    assert redis_ns.keys() == []


def test_enqueue__wrong_payload_type_is_refused(redis_ns: RedisNamespace) -> None:
    @dataclass
    class Other:
        to: str

    with pytest.raises(InvalidPayload, match=r"expected a Mail payload, got .*Other"):
        SendMail.enqueue(Other("a"))  # type: ignore[arg-type]
    assert redis_ns.keys() == []


def test_enqueue__oversized_payload_names_both_sizes(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_PAYLOAD_BYTES": 1000}

    with pytest.raises(
        PayloadTooLarge, match=r"is \d+ bytes, over the limit of 1000 bytes"
    ) as info:
        SendMail.enqueue(Mail("a", {"blob": "x" * 2000}))
    assert "references" in str(info.value)
    assert info.value.size > 2000
    assert redis_ns.keys() == []


def test_enqueue__unknown_queue_lists_the_configured_ones(redis_ns: RedisNamespace) -> None:
    with pytest.raises(UnknownQueue, match="critical, default, low"):
        SendMail.enqueue(Mail("a"), queue="urgent")
    assert redis_ns.keys() == []


def test_enqueue__delay_and_eta_together_or_naive_eta_are_refused(
    redis_ns: RedisNamespace,
) -> None:
    with pytest.raises(TypeError, match="delay or eta"):
        SendMail.enqueue(Mail("a"), delay=1, eta=datetime.now(UTC))
    with pytest.raises(ValueError, match="timezone-aware"):
        SendMail.enqueue(Mail("a"), eta=datetime.now())
    assert redis_ns.keys() == []


def test_enqueue__eta_in_the_future_is_scheduled(redis_ns: RedisNamespace) -> None:
    eta = datetime.now(UTC) + timedelta(hours=1)

    handle = SendMail.enqueue(Mail("a"), eta=eta)

    score = redis_ns.client.zscore(f"{redis_ns.namespace}:{{critical}}:scheduled", handle.id)
    assert handle.state == "scheduled"
    assert score == pytest.approx(eta.timestamp(), abs=0.01)
    assert run_burst() == []


def test_enqueue_many__one_bad_payload_writes_nothing(redis_ns: RedisNamespace) -> None:
    payloads = [Mail(f"{i}") for i in range(10)] + [Mail("bad", tags=(1,))]

    with pytest.raises(InvalidPayload):
        SendMail.enqueue_many(payloads)
    assert redis_ns.keys() == []


def test_enqueue_many__batches_keep_order(redis_ns: RedisNamespace) -> None:
    handles = SendMail.enqueue_many([Mail(f"{i}") for i in range(1200)])

    outcomes = run_burst()

    assert [h.state for h in handles] == ["pending"] * 1200
    assert len({h.id for h in handles}) == 1200
    assert [o.task_id for o in outcomes] == [h.id for h in handles]
    assert ran == [f"{i}" for i in range(1200)]


@pytest.mark.django_db(transaction=True)
def test_enqueue__on_commit_waits_for_the_commit(redis_ns: RedisNamespace) -> None:
    with transaction.atomic():
        handle = SendMail.enqueue(Mail("kept"), on_commit=True)
        assert handle.state == "deferred"
        assert _records(redis_ns) == []
    assert handle.refresh() == "pending"

    with transaction.atomic():
        SendMail.enqueue(Mail("rolled back"), on_commit=True)
        transaction.set_rollback(True)
    run_burst()
    assert ran == ["kept"]


def test_enqueue__redis_down_raises_broker_unavailable_without_the_password(
    settings: Any,
) -> None:
    url = f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"
    settings.JOBS = {"REDIS_URL": url, "ENQUEUE_TIMEOUT": 1}

    with pytest.raises(BrokerUnavailable) as info:
        SendMail.enqueue(Mail("a"))
    assert "s3cret-pass" not in str(info.value)
    assert ":***@127.0.0.1" in str(info.value)
    assert isinstance(info.value, ConnectionError)


def test_enqueue__frozen_redis_raises_within_the_deadline_and_writes_whole_or_nothing(
    private_redis: RedisServer, settings: Any
) -> None:
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t", "ENQUEUE_TIMEOUT": 1}
    SendMail.enqueue(Mail("warm-up"))  # connect and load the script first
    private_redis.freeze()
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            SendMail.enqueue(Mail("during the freeze"))
        elapsed = time.monotonic() - started
    finally:
        private_redis.thaw()

    assert elapsed < 2.5
    client = private_redis.client(decode_responses=True)
    pending = client.lrange("t:{critical}:pending", 0, -1)
    records = {key.rsplit(":", 1)[1] for key in client.scan_iter("t:{critical}:t:*")}
    # An error here may still mean enqueued (the docs say so), but never half a task.
    assert set(pending) == records
    assert len(records) in (1, 2)


def test_enqueue__frozen_redis_raises_within_the_deadline_on_new_connections_too(
    private_redis: RedisServer, settings: Any
) -> None:
    # Found by the reliability battery (tests/chaos, Redis frozen): enqueues from several
    # threads, each on a connection new to the pool, took twice ENQUEUE_TIMEOUT to give up,
    # because a new connection's health check pinged Redis with retries of its own.
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t", "ENQUEUE_TIMEOUT": 1}
    SendMail.enqueue(Mail("warm-up"))  # connect and load the script first
    elapsed: list[float] = []

    def enqueue() -> None:
        started = time.monotonic()
        try:
            SendMail.enqueue(Mail("during the freeze"))
        except BrokerUnavailable:
            elapsed.append(time.monotonic() - started)

    private_redis.freeze()
    try:
        threads = [threading.Thread(target=enqueue) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        private_redis.thaw()

    assert len(elapsed) == 4
    assert max(elapsed) < 1.5, elapsed


def test_enqueue__disabled_inline_runs_now(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": "inline"}

    ok = SendMail.enqueue(Mail("inline"))

    assert ok.state == "completed"
    assert ran == ["inline"]


def test_enqueue__disabled_inline_failure_is_logged_not_raised(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.JOBS = {"REDIS_URL": None}

    with caplog.at_level(logging.ERROR, logger="django_jobs"):
        handle = SendMail.enqueue(Mail("fail"))

    assert handle.state == "dead"
    assert "mail server said no" in caplog.text


def test_enqueue__disabled_skip_and_raise(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": "skip"}
    assert SendMail.enqueue(Mail("skipped")).state == "skipped"
    assert ran == []

    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": "raise"}
    with pytest.raises(JobsDisabled, match="REDIS_URL"):
        SendMail.enqueue(Mail("refused"))


@pytest.mark.parametrize("when_disabled", ["inline", "skip", "raise"])
def test_get_broker__disabled_error_names_the_real_when_disabled(
    settings: Any, when_disabled: str
) -> None:
    # The admin, the API and JobHandle.refresh reach get_broker() whatever WHEN_DISABLED is.
    settings.JOBS = {"REDIS_URL": None, "WHEN_DISABLED": when_disabled}

    with pytest.raises(JobsDisabled) as caught:
        get_broker()

    assert f'JOBS["WHEN_DISABLED"] is {when_disabled!r}' in str(caught.value)
    assert "REDIS_URL" in str(caught.value)
    if when_disabled != "raise":
        assert '"raise"' not in str(caught.value)


def test_enqueue__times_are_kept_to_the_microsecond(redis_ns: RedisNamespace) -> None:
    """Listings merge queues on these times: two enqueues a few microseconds apart must not tie
    (Lua's tostring kept a tenth of a millisecond)."""
    first = SendMail.enqueue(Mail("a@example.com"), queue="default")
    second = SendMail.enqueue(Mail("b@example.com"), queue="low")
    times = [
        redis_ns.client.hget(f"{redis_ns.namespace}:{{{h.queue}}}:t:{h.id}", "enqueued_at")
        for h in (first, second)
    ]
    assert all(t is not None and len(t.split(b".")[1]) == 6 for t in times), times
    assert float(times[0]) < float(times[1])
