"""Limits per job type on a sharded queue (issues 20 and 21): a job type with a concurrency_limit
or a rate_limit has every task on one shard of the queue, the one its name hashes to, so that
its limit keys (a queue's, so a shard's: dequeue.lua) are one set and the limit holds across
every worker, as on a queue of one shard. Its idempotency keys are in that shard's slot too: a
keyed task is still one round trip, and a duplicate is still refused on every queue.

Red before the fix: a concurrency_limit of 1 let 4 tasks run at once on 4 shards, a rate_limit
of 2/h let 8 start (each shard counted its own)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from django_jobs import DuplicateJob, Job
from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.keys import shard_index
from django_jobs.worker.processor import Processor
from tests.conftest import RedisNamespace
from tests.integration.test_fetch_rounds import Rounds, ack
from tests.integration.test_fetch_rounds import rounds as rounds  # a fixture
from tests.integration.test_shards import NAMES, SHARDS, Hot, Item, pending, per_shard, served
from tests.integration.test_shards import sharded as sharded  # a fixture
from tests.integration.test_shards import trips as trips  # a fixture


@dataclass(frozen=True)
class Tag:
    n: int


class CappedOne(Job[Tag]):
    name = "shards.CappedOne"
    queue = "default"
    concurrency_limit = 1

    def run(self, payload: Tag) -> None:
        pass


class CappedThree(Job[Tag]):
    name = "shards.CappedThree"
    queue = "default"
    concurrency_limit = 3

    def run(self, payload: Tag) -> None:
        pass


class PacedTwo(Job[Tag]):
    name = "shards.PacedTwo"
    queue = "default"
    rate_limit = "2/h"

    def run(self, payload: Tag) -> None:
        pass


def home(job: type[Job[Tag]]) -> str:
    """The shard of default every task of a limited job type goes to: its name's."""
    return NAMES[shard_index(job.name, SHARDS)]


def limited_broker() -> RedisBroker:
    broker = get_broker()
    assert isinstance(broker, RedisBroker)
    Processor(broker)  # takes the registry's limits, as every worker does
    return broker


def take_one_by_one(broker: RedisBroker, times: int) -> list[Delivery]:
    """As `times` worker children would fetch, none acknowledging."""
    return [d for _ in range(times) for d in broker.dequeue_many(served(), 1)]


def test_limits__the_job_types_hash_to_different_shards_of_default() -> None:
    # Not a property of the fix: a check that the tests below would see tasks on another shard
    # than the first (and two job types apart) if the routing ignored the limit.
    assert home(CappedOne) != home(CappedThree)
    assert NAMES[0] not in (home(CappedOne), home(PacedTwo))


@pytest.mark.parametrize(("job", "limit"), [(CappedOne, 1), (CappedThree, 3)])
def test_concurrency_limit__holds_across_the_shards(
    sharded: RedisNamespace, job: type[Job[Tag]], limit: int
) -> None:
    for n in range(4 * SHARDS):
        job.enqueue(Tag(n))
    Hot.enqueue_many([Item(n) for n in range(SHARDS)])  # a job type without limits beside
    broker = limited_broker()

    taken = take_one_by_one(broker, 4 * SHARDS + SHARDS)

    assert per_shard(sharded)[home(job)] == 0  # every task of the job type was on one shard
    running = [d for d in taken if d.queue == home(job) and job.name.encode() in d.raw]
    assert len(running) == limit, Counter(d.queue for d in taken)
    assert len(taken) - len(running) == SHARDS  # the unlimited ones all ran beside
    parked = f"{sharded.namespace}:{{{home(job)}}}:parked:{job.name}"
    assert sharded.client.llen(parked) == 4 * SHARDS - limit
    # The end of a run gives its slot to the next task, on the same shard.
    written, (again,) = broker.settle([ack(running[0])], served(), 1)
    assert written == [True]
    assert again.queue == home(job)


def test_rate_limit__holds_across_the_shards(sharded: RedisNamespace) -> None:
    for n in range(4 * SHARDS):
        PacedTwo.enqueue(Tag(n))
    broker = limited_broker()

    taken = take_one_by_one(broker, 4 * SHARDS)

    assert [d.queue for d in taken] == [home(PacedTwo)] * 2
    booked = sharded.client.zcard(f"{sharded.namespace}:{{{home(PacedTwo)}}}:scheduled")
    assert booked == 4 * SHARDS - 2  # the others wait for the next windows, on that shard


def test_enqueue_many__a_limited_job_types_batch_goes_to_its_shard(
    sharded: RedisNamespace,
) -> None:
    for batch in range(SHARDS):
        CappedThree.enqueue_many([Tag(10 * batch + n) for n in range(3)])

    assert per_shard(sharded) == {n: 3 * SHARDS if n == home(CappedThree) else 0 for n in NAMES}


def test_idempotency__a_limited_job_types_keys_are_in_its_shard_one_round_trip_each(
    sharded: RedisNamespace, trips: Rounds
) -> None:
    broker = get_broker()
    for n in range(2 * SHARDS):
        trips.take()
        handle = CappedOne.enqueue(Tag(n), idempotency_key=f"order-{n}")
        assert trips.take() == 1  # the key in the slot of the task's shard: no hand-off
        assert handle.id in pending(sharded, home(CappedOne))
        key = broker.keys("default").idempotency(CappedOne.name, f"order-{n}")
        assert key.startswith(f"{sharded.namespace}:{{{home(CappedOne)}}}:idem:")


@pytest.mark.parametrize("second", ["default", "low", "critical"])
def test_idempotency__a_limited_job_types_duplicate_is_refused_on_every_queue(
    sharded: RedisNamespace, second: str
) -> None:
    for n in range(SHARDS):
        original = CappedOne.enqueue(Tag(n), idempotency_key=f"k{n}")

        with pytest.raises(DuplicateJob) as refused:
            CappedOne.enqueue(Tag(n), queue=second, idempotency_key=f"k{n}")

        assert (refused.value.original_id, refused.value.original_queue) == (
            original.id,
            "default",
        )
    assert per_shard(sharded)[home(CappedOne)] == SHARDS
    assert sum(per_shard(sharded).values()) == SHARDS
    assert (pending(sharded, "low"), pending(sharded, "critical")) == ([], [])


def test_idempotency__a_limited_job_types_key_taken_on_another_queue_is_refused_on_default(
    sharded: RedisNamespace,
) -> None:
    for n in range(SHARDS):
        original = CappedOne.enqueue(Tag(n), queue="low", idempotency_key=f"x{n}")  # handed off
        with pytest.raises(DuplicateJob) as refused:
            CappedOne.enqueue(Tag(n), idempotency_key=f"x{n}")
        assert (refused.value.original_id, refused.value.original_queue) == (original.id, "low")
    assert len(pending(sharded, "low")) == SHARDS
    assert sum(per_shard(sharded).values()) == 0
