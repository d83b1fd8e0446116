"""A record's `receipt` lives as long as its run: dequeue writes it (the fetch's receipt,
broker/receipts.py), and every script that ends the run deletes it, since give_back.lua reads it
only in an active record. A completed task kept for its retention does not carry it (a field of
a hash-table record costs some 60 bytes, and the ninth field doubles the table).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from django_jobs.broker.protocol import Action, Delivery, EnqueueRequest, Verdict
from django_jobs.client import get_broker
from tests.conftest import RedisNamespace


def fields(ns: RedisNamespace, task_id: str) -> dict[bytes, bytes]:
    return ns.client.hgetall(get_broker().keys("default").task(task_id))


def leased(ns: RedisNamespace) -> Delivery:
    """A task enqueued and handed out: its record holds the fetch's receipt."""
    broker = get_broker()
    broker.enqueue([EnqueueRequest("a", "default", json.dumps({"task": "a"}))])
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    assert fields(ns, "a")[b"receipt"]
    return delivery


def expire_lease(ns: RedisNamespace, broker: Any) -> None:
    ns.client.zadd(broker.keys("default").lease, {"a": 1.0})
    assert [task_id for task_id, _ in broker.recover("default")] == ["a"]


def cancel_then_end(ns: RedisNamespace, broker: Any, d: Delivery) -> None:
    broker.cancel("default", "a")
    assert broker.end_canceled(d, "JobCanceled: x", "")


def settle_ack(ns: RedisNamespace, broker: Any, d: Delivery) -> None:
    """The hot path: the ack rides on the next fetch (ack_dequeue)."""
    verdict = Verdict(d.id, d.queue, d.epoch, "j", Action.ACK, retention=3600)
    assert broker.settle([verdict], ["default"], 1) == ([True], [])


OUTCOMES: dict[str, Callable[[RedisNamespace, Any, Delivery], None]] = {
    "ack": lambda ns, b, d: b.ack(d, 3600),
    "ack_dequeue": settle_ack,
    "retry": lambda ns, b, d: b.retry(d, 60, "E: x", ""),
    "retry_unknown": lambda ns, b, d: b.retry(d, 10, "unknown", "", spend=False, unknown=True),
    "kill": lambda ns, b, d: b.kill(d, "E: x", ""),
    "requeue": lambda ns, b, d: b.requeue(d, crash=False),
    "requeue_crash": lambda ns, b, d: b.requeue(d, crash=True, reason="SIGKILL"),
    "recover": lambda ns, b, d: expire_lease(ns, b),
    "end_canceled": cancel_then_end,
}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_the_end_of_a_run_deletes_its_receipt(redis_ns: RedisNamespace, outcome: str) -> None:
    delivery = leased(redis_ns)

    OUTCOMES[outcome](redis_ns, get_broker(), delivery)

    record = fields(redis_ns, "a")
    assert record[b"state"] != b"active"
    assert b"receipt" not in record


def test_a_completed_record_has_six_fields(redis_ns: RedisNamespace) -> None:
    """No receipt, and no counter nothing counted (attempts and crashes read as 0): a field of a
    hash-table record costs some 56 bytes."""
    delivery = leased(redis_ns)

    assert get_broker().ack(delivery, 3600)

    assert sorted(fields(redis_ns, "a")) == [
        b"completed_at", b"enqueued_at", b"epoch", b"msg", b"started_at", b"state",
    ]  # fmt: skip
