"""Log lines of a sharded queue's tasks (issue 20) name the queue of ours, the shard after it in
parentheses (keys.queue_label): `task ... on 'default' (shard default#20)`, never the shard
alone. Red before: the recoverer said "on default#20", the give-back "of queue 'default#20'"."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ResponseError

from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.keys import queue_label
from django_jobs.worker.recoverer import Recoverer
from tests.conftest import RedisNamespace
from tests.integration.test_shards import NAMES, SHARDS, Hot, Item, served
from tests.integration.test_shards import sharded as sharded  # a fixture


def test_queue_label__a_queue_is_itself_a_shard_its_queue_then_the_shard() -> None:
    assert queue_label("default") == "'default'"
    assert queue_label("default#20") == "'default' (shard default#20)"


def test_recoverer__a_lease_expired_on_each_shard_is_logged_on_default_with_its_shard(
    sharded: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(SHARDS):
        Hot.enqueue(Item(n))
    broker = get_broker()
    running = broker.dequeue_many(served(), SHARDS)
    for d in running:  # its worker died: the lease is long past
        sharded.client.zadd(broker.keys(d.queue).lease, {d.id: 1})

    with caplog.at_level(logging.WARNING):
        Recoverer(broker, served()).tick()

    lines = [r.getMessage() for r in caplog.records if "lease expired" in r.getMessage()]
    assert sorted(lines) == sorted(
        f"task {d.id} on {queue_label(d.queue)}: its worker died (lease expired); now pending"
        for d in running
    )
    assert {d.queue for d in running} == set(NAMES)
    assert not any(f"on {name}" in line for line in lines for name in NAMES[1:])


def test_give_back__a_failure_is_logged_on_default_with_its_shard(
    sharded: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    broker = get_broker()
    assert isinstance(broker, RedisBroker)

    with caplog.at_level(logging.WARNING, "django_jobs.broker"):
        broker._log_given([(NAMES[1], "r1")], [ResponseError("ERR refused")])

    (line,) = [r.getMessage() for r in caplog.records]
    assert f"tasks of queue 'default' (shard {NAMES[1]}) a fetch took" in line


def test_hand_back__a_failure_is_logged_on_default_with_its_shard(
    sharded: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(SHARDS):
        Hot.enqueue(Item(n))
    broker = get_broker()
    (task,) = [d for d in broker.dequeue_many(served(), SHARDS) if d.queue == NAMES[1]]
    pending = broker.keys(task.queue).pending
    sharded.client.delete(pending)
    sharded.client.set(pending, "not a list")  # so that the requeue is refused

    with caplog.at_level(logging.WARNING, "django_jobs.broker"):
        assert broker.hand_back([task], "stopping") == 0

    (line,) = [r.getMessage() for r in caplog.records if "could not give back" in r.getMessage()]
    assert f"task {task.id} of queue 'default' (shard {NAMES[1]}) (stopping)" in line
