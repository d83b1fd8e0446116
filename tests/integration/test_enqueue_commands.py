"""The commands Redis runs inside an enqueue's script (issue 22: each costs about 2 µs of Redis
per call), counted with INFO commandstats on a Redis of the test's own.

A task due now: the record's TYPE (the replay guard, and the refusal of a key of another type),
TIME, the LPUSH of its id (which refuses a pending list of another type before anything is
written), the wake-up token's LPUSH and the record's HSET; the token's LTRIM only once 64
tokens wait. A batch (enqueue_many): a TYPE per record, one TIME, one LPUSH of every id, one of
the tokens, an HSET per record. docs/bench.rst ("Where an enqueue's time goes") quotes these.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.client import get_broker
from tests.conftest import RedisServer
from tests.integration.test_hot_path_commands import inner

CALLS = 20


@pytest.fixture
def redis(private_redis: RedisServer, settings: Any) -> Any:
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t"}
    return private_redis.client(decode_responses=True)


def request(task_id: str, delay: float = 0.0) -> EnqueueRequest:
    return EnqueueRequest(task_id, "default", '{"v": 1}', delay=delay)


def test_enqueue__five_commands_inside_a_task_due_now(redis: Any) -> None:
    get_broker().enqueue([request("warm-up")])  # the script loaded
    redis.config_resetstat()

    for n in range(CALLS):
        get_broker().enqueue([request(f"t{n}")])

    calls = inner(redis)
    assert calls.pop("evalsha") == CALLS
    assert {name: n / CALLS for name, n in calls.items()} == {
        "type": 1, "time": 1, "lpush": 2, "hset": 1,
    }  # fmt: skip
    assert redis.llen("t:{default}:pending") == CALLS + 1


def test_enqueue__a_task_due_later_is_four(redis: Any) -> None:
    get_broker().enqueue([request("warm-up", delay=60)])
    redis.config_resetstat()

    for n in range(CALLS):
        get_broker().enqueue([request(f"t{n}", delay=60)])

    calls = inner(redis)
    assert calls.pop("evalsha") == CALLS
    assert {name: n / CALLS for name, n in calls.items()} == {
        "type": 1, "time": 1, "zadd": 1, "hset": 1,
    }  # fmt: skip
    record = redis.hgetall("t:{default}:t:t0")
    assert record["state"] == "scheduled"
    assert float(record["next_at"]) == pytest.approx(float(record["enqueued_at"]) + 60, abs=1)


def test_enqueue_many__one_push_for_the_ids_and_one_for_the_tokens(redis: Any) -> None:
    get_broker().enqueue([request("w1"), request("w2")])
    redis.config_resetstat()

    get_broker().enqueue([request(f"t{n}") for n in range(CALLS)])

    calls = inner(redis)
    assert calls == {"evalsha": 1, "type": CALLS, "time": 1, "lpush": 2, "hset": CALLS}
    pending = redis.lrange("t:{default}:pending", 0, -1)
    assert pending == [f"t{n}" for n in reversed(range(CALLS))] + ["w2", "w1"]
    assert redis.llen("t:{default}:wake") == CALLS + 2


def test_enqueue_many__a_batch_of_more_than_a_thousand_goes_in_whole_and_in_order(
    redis: Any,
) -> None:
    ids = [f"t{n:04d}" for n in range(2500)]

    accepted = get_broker().enqueue([request(i) for i in ids])
    scheduled = get_broker().enqueue([request(f"s{i}", delay=60) for i in ids])

    assert {a.state for a in accepted} == {"pending"}
    assert redis.lrange("t:{default}:pending", 0, -1) == ids[::-1]
    assert {a.state for a in scheduled} == {"scheduled"}
    assert redis.zcard("t:{default}:scheduled") == len(ids)
    assert redis.hget("t:{default}:t:s" + ids[-1], "state") == "scheduled"
