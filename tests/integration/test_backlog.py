"""The supervisor's backlog of decisions it could not write: a refusal does not hold up the rest.

Found by review: a decision Redis refused (a key of ours with the wrong type) stayed at the
head of the backlog forever, and every decision behind it waited out its lease.
"""

from __future__ import annotations

import logging

import pytest

from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.client import get_broker
from django_jobs.worker import policy
from django_jobs.worker.backlog import Backlog
from tests.conftest import RedisNamespace


def test_backlog__a_refused_decision_is_dropped_and_the_next_written(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    broker = get_broker()
    broker.enqueue([EnqueueRequest(id="a" * 32, queue="default", encoded='{"v": 1}')])
    broker.enqueue([EnqueueRequest(id="b" * 32, queue="low", encoded='{"v": 1}')])
    on_default, on_low = broker.dequeue(["default"]), broker.dequeue(["low"])
    assert on_default is not None
    assert on_low is not None
    # The queue "default"'s pending key is not a list: putting a task back there is refused.
    redis_ns.client.set(f"{redis_ns.namespace}:{{default}}:pending", "written by hand")
    backlog = Backlog(broker)
    backlog.add(on_default, policy.crashed("child 1 died"), "child 1 died")
    backlog.add(on_low, policy.crashed("child 2 died"), "child 2 died")

    with caplog.at_level(logging.WARNING, logger="django_jobs.worker.supervisor"):
        backlog.tick()

    assert backlog.items == []
    assert redis_ns.client.hget(f"{redis_ns.namespace}:{{low}}:t:{'b' * 32}", "state") == (
        b"pending"
    )
    assert "what becomes of it was refused" in caplog.text


def test_backlog__a_slot_on_the_move_keeps_the_decision_for_the_next_tick(
    redis_ns: RedisNamespace,
) -> None:
    """TRYAGAIN after the call's budget did not run the write and is over in a moment: the
    decision stays (as when Redis does not answer), instead of being dropped as a refusal is,
    which would leave the task to wait out its lease."""
    from django_jobs.exceptions import BrokerUnavailable
    from tests.integration.test_enqueue_resend import MovingWire

    broker = get_broker()
    broker.enqueue([EnqueueRequest(id="c" * 32, queue="default", encoded='{"v": 1}')])
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    backlog = Backlog(broker)
    backlog.add(delivery, policy.crashed("child 1 died"), "child 1 died")

    broker.wire = MovingWire()  # type: ignore[assignment]
    try:
        with pytest.raises(BrokerUnavailable):
            backlog.tick()
    finally:
        broker.wire = None
    assert len(backlog.items) == 1

    backlog.tick()  # the slot has moved
    assert backlog.items == []
    assert redis_ns.client.hget(f"{redis_ns.namespace}:{{default}}:t:{'c' * 32}", "state") in (
        b"pending",
        b"retry",
        b"scheduled",
    )
