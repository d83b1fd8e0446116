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
