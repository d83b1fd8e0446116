"""The commands Redis runs inside the worker's hot path: a child's `settle` (the ack of its last
task and the fetch of the next, one ack_dequeue call), counted with INFO commandstats on a
Redis of the test's own (the shared one counts every other test's commands too).

bench.memory prints the same count for 10,000 jobs of a 1 KB payload (docs/bench.rst, Memory).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_jobs.broker.protocol import Action, Delivery, EnqueueRequest, Verdict
from django_jobs.client import get_broker
from tests.conftest import RedisServer

JOBS = 20
#: Per job: held's HMGET, ZADD completed, LREM active, ZREM lease, HDEL receipt, HSET, INCR
#: (the ack); TIME, EXISTS paused, LMOVE, ZADD lease, HMGET, HSET (the fetch).
COMMANDS = 13


@pytest.fixture
def redis(private_redis: RedisServer, settings: Any) -> Any:
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t"}
    return private_redis.client()


def fill(count: int) -> Delivery:
    """Enqueue count + 1 tasks and take the first, as a child holds it."""
    broker = get_broker()
    ids = [f"{i:02d}" for i in range(count + 1)]
    broker.enqueue([EnqueueRequest(i, "default", json.dumps({"task": i})) for i in ids])
    held = broker.dequeue(["default"])
    assert held is not None
    return held


def drain(held: Delivery, count: int) -> list[tuple[Delivery, Delivery]]:
    """Settle count times, each acking the task held and fetching the next: (acked, fetched)."""
    steps = []
    for _ in range(count):
        ack = Verdict(held.id, "default", held.epoch, "j", Action.ACK, retention=3600)
        written, fetched = get_broker().settle([ack], ["default"], 1)
        assert written == [True]
        assert len(fetched) == 1
        steps.append((held, fetched[0]))
        held = fetched[0]
    return steps


def inner(redis: Any) -> dict[str, int]:
    """The calls of each command since the last CONFIG RESETSTAT, the client's own left out."""
    stats = {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in redis.info("commandstats").items()
    }
    return {name: calls for name, calls in stats.items() if "|" not in name and name != "info"}


def test_settle__one_script_call_one_clock_read_and_13_commands_a_job(redis: Any) -> None:
    held = fill(JOBS + 1)
    [(_, held)] = drain(held, 1)  # the day counter made (its EXPIRE), the scripts loaded
    redis.config_resetstat()

    drain(held, JOBS)

    calls = inner(redis)
    assert calls.pop("evalsha") == JOBS
    assert {name: n / JOBS for name, n in calls.items()} == {
        "hmget": 2, "zadd": 2, "hset": 2, "lrem": 1, "zrem": 1, "hdel": 1, "incr": 1,
        "time": 1, "exists": 1, "lmove": 1,
    }  # fmt: skip
    assert sum(calls.values()) == COMMANDS * JOBS


def test_settle__the_ack_and_the_fetch_read_one_clock(redis: Any) -> None:
    [(acked, fetched)] = drain(fill(1), 1)
    k = get_broker().keys("default")

    completed_at = redis.hget(k.task(acked.id), "completed_at")
    started_at = redis.hget(k.task(fetched.id), "started_at")

    assert completed_at == started_at
    assert float(redis.zscore(k.completed, acked.id)) == pytest.approx(float(completed_at) + 3600)
