"""What a fetch costs in round trips (issue 20; docs/scale-redis.rst quotes these): one dequeue
call per queue, in strict priority order (broker/fetch.py), on one server and, in the Cluster
leg, on a Cluster, where one round trip reaches every node at once.

A worker child's fetch is `settle` (the outcome of its task and the next fetch) or, idle,
`wait_and_fetch`; each test counts the broker's round trips (`ScriptCalls._round_trip`).
"""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs.broker import scripts
from django_jobs.broker.connection import ScriptCalls
from django_jobs.broker.protocol import Action, Delivery, EnqueueRequest, Verdict
from django_jobs.client import get_broker
from tests.conftest import RedisNamespace

QUEUES = ["critical", "default", "low"]


class Rounds:
    """Counts the broker's round trips."""

    def __init__(self) -> None:
        self.count = 0

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch, redis_ns: RedisNamespace) -> Rounds:
    counter = Rounds()
    original = ScriptCalls._round_trip
    # Steady state, as docs/scale-redis.rst quotes it: every script already in the server's
    # cache (on every master of a Cluster), so a first use's NOSCRIPT and reload is not counted.
    for source in scripts.SOURCES.values():
        get_broker().client.script_load(source)

    def counted(self: ScriptCalls, *args: Any, **kwargs: Any) -> list[Any]:
        counter.count += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ScriptCalls, "_round_trip", counted)
    return counter


def put(queue: str, *ids: str) -> None:
    get_broker().enqueue([EnqueueRequest(i, queue, '{"v":1}') for i in ids])


def ack(delivery: Delivery) -> Verdict:
    return Verdict(delivery.id, delivery.queue, delivery.epoch, "", Action.ACK, retention=60)


def settle(after: Delivery, queues: list[str]) -> Delivery | None:
    written, fetched = get_broker().settle([ack(after)], queues, 1)
    assert written == [True]
    return fetched[0] if fetched else None


def test_fetch__one_queue_is_one_round_trip(rounds: Rounds) -> None:
    put("default", "a", "b")
    (first,) = get_broker().dequeue_many(["default"], 1)
    rounds.take()

    second = settle(first, ["default"])  # ack_dequeue: one script call

    assert (second and second.id, rounds.take()) == ("b", 1)


def test_fetch__three_queues_one_round_trip_while_the_work_stays_on_a_queue(
    rounds: Rounds,
) -> None:
    put("default", "a", "b", "c")
    rounds.take()

    # The first fetch leads with critical (empty) and learns that default has work: two.
    (first,) = get_broker().dequeue_many(QUEUES, 1)
    assert (first.id, rounds.take()) == ("a", 2)
    # From then on default leads: one round trip per task, the ack in it.
    second = settle(first, QUEUES)
    assert (second and second.id, rounds.take()) == ("b", 1)
    assert second is not None
    third = settle(second, QUEUES)
    assert (third and third.id, rounds.take()) == ("c", 1)
    # Nothing left anywhere: two round trips find it out (the lead, then the queues after it:
    # the first looks only at those before), then the child waits.
    assert third is not None
    assert (settle(third, QUEUES), rounds.take()) == (None, 2)


def test_fetch__a_task_ahead_of_the_lead_costs_one_more_and_goes_first(rounds: Rounds) -> None:
    put("low", "l1", "l2")
    (first,) = get_broker().dequeue_many(QUEUES, 1)  # low leads from now on
    put("critical", "urgent")
    rounds.take()

    # The fetch takes low's next task, sees critical's, hands it back and takes critical's.
    nxt = settle(first, QUEUES)

    assert (nxt and nxt.id, rounds.take()) == ("urgent", 2)
    after = settle(nxt, QUEUES) if nxt else None
    assert after is not None
    assert after.id == "l2", "handed back first in line"


def test_wait_and_fetch__a_token_for_the_lead_queue_is_one_round_trip(rounds: Rounds) -> None:
    put("default", "a")
    (first,) = get_broker().dequeue_many(QUEUES, 1)  # default leads
    settle(first, QUEUES)
    put("default", "b")
    rounds.take()

    fetched = get_broker().wait_and_fetch(QUEUES, 1.0)

    # One server: the BLPOP and the fetch in one round trip. A Cluster: the BLPOPs' answer,
    # then the unblocks and the fetch in one.
    assert ([d.id for d in fetched], rounds.take()) == (["b"], 1)
