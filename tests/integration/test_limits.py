"""Limits per job type on the real Redis (issue 21): `concurrency_limit` parks what is over it and
every end of a run holding a slot brings one back; `rate_limit` books what is over it in the next
windows with room; neither spends an attempt nor holds up another job type. The worker-process
side (two workers, kill -9) is tests/acceptance/test_limits_worker.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs import Job
from django_jobs.broker.limits import dequeue_args
from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.jobs import registry
from django_jobs.keys import QueueKeys
from django_jobs.worker.processor import Processor
from tests.conftest import RedisNamespace, RedisServer, wait_until
from tests.redis_state import redis_now


@dataclass(frozen=True)
class Item:
    n: int


class Capped(Job[Item]):
    name = "limits.Capped"
    concurrency_limit = 2

    def run(self, payload: Item) -> None:
        pass


class Free(Job[Item]):
    name = "limits.Free"

    def run(self, payload: Item) -> None:
        pass


class Paced(Job[Item]):
    name = "limits.Paced"
    rate_limit = "2/s"

    def run(self, payload: Item) -> None:
        pass


class Hourly(Job[Item]):
    name = "limits.Hourly"
    rate_limit = "3/h"

    def run(self, payload: Item) -> None:
        pass


def keys(ns: RedisNamespace) -> QueueKeys:
    return QueueKeys(ns.namespace, "default")


def limited_broker() -> RedisBroker:
    broker = get_broker()
    assert isinstance(broker, RedisBroker)
    Processor(broker)  # takes the registry's limits, as every worker does
    return broker


def enqueue(job: type[Job[Item]], count: int, start: int = 0) -> list[str]:
    return [job.enqueue(Item(n)).id for n in range(start, start + count)]


def fetch(broker: RedisBroker, count: int = 20) -> list[Delivery]:
    return broker.dequeue_many(["default"], count)


def record(ns: RedisNamespace, task_id: str) -> dict[str, str]:
    raw = ns.client.hgetall(keys(ns).task(task_id))
    counters = {"attempts": "0", "crashes": "0", "epoch": "0"}  # absent until counted: 0
    return counters | {k.decode(): v.decode() for k, v in raw.items()}


def parked(ns: RedisNamespace, job: str) -> list[str]:
    """The parked ids of job, oldest first."""
    return [i.decode() for i in reversed(ns.client.lrange(keys(ns).parked(job), 0, -1))]


def running(ns: RedisNamespace, job: str) -> list[str]:
    return sorted(i.decode() for i in ns.client.zrange(keys(ns).running(job), 0, -1))


def lapse(ns: RedisNamespace, key: str, task_id: str) -> None:
    """Move task_id's deadline in the sorted set key a second into the past (not renewed)."""
    ns.client.zadd(key, {task_id: redis_now(ns.client) - 1}, xx=True)


def test_registry__lists_the_limited_job_types() -> None:
    limits = {each.job: each for each in registry.limits()}

    assert limits["limits.Capped"].concurrency == 2
    assert limits["limits.Capped"].rate is None
    rate = limits["limits.Paced"].rate
    assert rate is not None
    assert (rate.count, rate.period) == (2, 1)
    assert "limits.Free" not in limits


def test_concurrency__parks_what_is_over_and_other_job_types_flow(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    capped = enqueue(Capped, 5)
    free = enqueue(Free, 3)

    fetched = fetch(broker)

    assert sorted(d.id for d in fetched) == sorted(capped[:2] + free)
    assert running(redis_ns, "limits.Capped") == sorted(capped[:2])
    assert parked(redis_ns, "limits.Capped") == capped[2:]
    for task_id in capped[2:]:  # waiting: nothing spent, no epoch taken
        fields = record(redis_ns, task_id)
        assert (fields["state"], fields["attempts"], fields["epoch"]) == ("pending", "0", "0")
    assert redis_ns.client.llen(keys(redis_ns).pending) == 0
    assert fetch(broker) == []  # nothing polls a parked task back


@pytest.mark.parametrize(
    ("end", "requeued"),
    [
        pytest.param(lambda b, d: b.ack(d, 60), False, id="ack"),
        pytest.param(lambda b, d: b.retry(d, 60, "Boom", ""), False, id="retry"),
        pytest.param(lambda b, d: b.kill(d, "Boom", ""), False, id="kill"),
        pytest.param(lambda b, d: b.requeue(d, crash=True, reason="died"), True, id="crash"),
        pytest.param(lambda b, d: b.requeue(d, crash=False), True, id="requeue"),
    ],
)
def test_concurrency__each_end_of_a_run_gives_its_slot_to_the_oldest_parked(
    redis_ns: RedisNamespace, end: Callable[[RedisBroker, Delivery], Any], requeued: bool
) -> None:
    broker = limited_broker()
    capped = enqueue(Capped, 4)
    first, _second = fetch(broker)

    assert end(broker, first)

    assert running(redis_ns, "limits.Capped") == [capped[1]]
    assert parked(redis_ns, "limits.Capped") == capped[3:]
    assert "limited" not in record(redis_ns, first.id)
    # The oldest parked task is next in line; a task requeued goes before it, at the head.
    expected = first.id if requeued else capped[2]
    (next_one,) = fetch(broker)
    assert next_one.id == expected
    assert next_one.attempts == 0
    assert running(redis_ns, "limits.Capped") == sorted([capped[1], expected])


def test_concurrency__an_ack_fetches_the_task_it_unparked_in_the_same_call(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    capped = enqueue(Capped, 3)
    first, _second = fetch(broker)
    verdict = Processor(broker).decide(first)
    assert verdict is not None

    written, fetched = broker.settle([verdict], ["default"], 1)

    assert written == [True]
    assert [d.id for d in fetched] == [capped[2]]
    assert fetched[0].attempts == 0
    assert fetched[0].epoch == "1"  # its first delivery: parking took no epoch


def test_concurrency__a_holder_whose_lease_expired_gives_its_slot_back_on_recovery(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    capped = enqueue(Capped, 3)
    fetch(broker)
    # Its worker was killed: the lease (and with it the slot) was not renewed.
    lapse(redis_ns, keys(redis_ns).lease, capped[0])
    lapse(redis_ns, keys(redis_ns).running("limits.Capped"), capped[0])

    assert broker.recover("default") == [(capped[0], "pending")]

    assert running(redis_ns, "limits.Capped") == [capped[1]]
    assert parked(redis_ns, "limits.Capped") == []
    (taken,) = fetch(broker)  # the crashed one and the one unparked for it: one free slot
    assert taken.id in (capped[0], capped[2])
    assert parked(redis_ns, "limits.Capped") == list({capped[0], capped[2]} - {taken.id})
    assert record(redis_ns, capped[0])["attempts"] == "0"


def test_concurrency__the_recoverers_sweep_fills_a_slot_no_release_gave_back(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    capped = enqueue(Capped, 3)
    fetch(broker)
    # A holder filed by a worker without limits (a rolling upgrade): its slot stays taken until
    # its lease deadline passes.
    lapse(redis_ns, keys(redis_ns).running("limits.Capped"), capped[0])

    assert broker.recover("default") == []

    assert parked(redis_ns, "limits.Capped") == []
    assert [d.id for d in fetch(broker)] == [capped[2]]
    assert redis_ns.client.hget(keys(redis_ns).limits, "limits.Capped") is None  # none parked


def test_concurrency__a_parked_task_deleted_meanwhile_is_dropped_on_the_way(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    capped = enqueue(Capped, 4)
    first, _second = fetch(broker)

    assert get_inspector().delete("default", capped[2])
    assert broker.ack(first, 60)

    assert [d.id for d in fetch(broker)] == [capped[3]]
    assert parked(redis_ns, "limits.Capped") == []


def test_concurrency__extend_lease_renews_the_slot_with_the_lease(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    enqueue(Capped, 1)
    (held,) = fetch(broker)
    k = keys(redis_ns)
    slot = k.running("limits.Capped")
    redis_ns.client.zadd(k.lease, {held.id: 1.0}, xx=True)
    redis_ns.client.zadd(slot, {held.id: 1.0}, xx=True)

    broker.extend_leases("default", [(held.id, held.epoch)])

    assert redis_ns.client.zscore(slot, held.id) == redis_ns.client.zscore(k.lease, held.id)
    assert redis_ns.client.zscore(slot, held.id) > redis_now(redis_ns.client)


def window_of(ns: RedisNamespace, period: float) -> int:
    return math.floor(redis_now(ns.client) / period)


def test_rate__books_what_is_over_in_the_next_windows_with_room(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    for _ in range(3):  # at most twice: an hour turning during the test starts it again
        redis_ns.cleanup()
        window = window_of(redis_ns, 3600)
        hourly = enqueue(Hourly, 8)
        free = enqueue(Free, 2)
        fetched = [d.id for d in fetch(broker)]
        if window_of(redis_ns, 3600) == window:
            break
    k = keys(redis_ns)

    assert sorted(fetched) == sorted(hourly[:3] + free)
    booked = redis_ns.client.zrange(k.scheduled, 0, -1, withscores=True)
    assert {i.decode(): s for i, s in booked} == {
        **dict.fromkeys(hourly[3:6], (window + 1) * 3600.0),
        **dict.fromkeys(hourly[6:], (window + 2) * 3600.0),
    }
    fields = record(redis_ns, hourly[7])
    assert (fields["state"], fields["attempts"], fields["epoch"]) == ("scheduled", "0", "0")
    assert fields["rate_booked"] == str(window + 2)


def test_rate__a_booked_task_starts_in_its_window_before_new_ones(
    redis_ns: RedisNamespace,
) -> None:
    broker = limited_broker()
    for _ in range(3):  # a second turning between the enqueue and the fetch starts it again
        redis_ns.cleanup()
        window = window_of(redis_ns, 1)
        paced = enqueue(Paced, 5)
        first = [d.id for d in fetch(broker)]
        if window_of(redis_ns, 1) == window:
            break
    assert first == paced[:2]

    wait_until(lambda: window_of(redis_ns, 1) > window, timeout=3)
    broker.forward("default")
    late = enqueue(Paced, 1, start=5)  # new: after the ones booked before it
    second = [d.id for d in fetch(broker)]

    window = window_of(redis_ns, 1)
    assert len(second) <= 2
    assert set(second) <= set(paced[2:4])
    assert late[0] not in second
    assert record(redis_ns, late[0])["state"] == "scheduled"
    for task_id in second:
        assert "rate_booked" not in record(redis_ns, task_id)
        assert record(redis_ns, task_id)["attempts"] == "0"


def test_unlimited_job__costs_no_redis_command_more_with_limits_on(
    private_redis: RedisServer, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "REDIS_URL": private_redis.url, "NAMESPACE": "cost"}
    broker = get_broker()
    assert isinstance(broker, RedisBroker)
    client = private_redis.client()

    def commands(limit_args: list[str | int]) -> int:
        broker.limit_args = limit_args
        enqueue(Free, 1)
        before = client.info("commandstats")
        (delivery,) = fetch(broker)
        after = client.info("commandstats")
        broker.ack(delivery, 60)
        return sum(
            stats["calls"] - before.get(name, {"calls": 0})["calls"]
            for name, stats in after.items()
            if name not in ("cmdstat_info",)
        )

    commands([])  # the scripts loaded, the connection made
    without = commands([])
    with_limits = commands(dequeue_args(registry.limits()))

    assert with_limits == without


def test_concurrency__a_late_heartbeat_keeps_the_slot_of_the_run_it_renews(
    redis_ns: RedisNamespace,
) -> None:
    # A worker stalled past its run's lease deadline, and a dequeue pruned its slot and gave
    # it to another task before any recoverer took the run; then its heartbeat renewed the
    # lease, and the run goes on: it must hold a slot again, else the job type runs over its
    # concurrency_limit and the accounting forgets that run.
    broker = limited_broker()
    enqueue(Capped, 3)  # concurrency_limit = 2: the third is parked
    first, second = fetch(broker)
    k = keys(redis_ns)
    lapse(redis_ns, k.lease, first.id)
    lapse(redis_ns, k.running("limits.Capped"), first.id)
    (fourth,) = enqueue(Capped, 1, start=3)
    assert [d.id for d in fetch(broker)] == [fourth]  # took first's pruned slot

    assert broker.renew_leases("default", [(first.id, first.epoch)]).lost == []

    assert running(redis_ns, "limits.Capped") == sorted([first.id, second.id, fourth])
    assert fetch(broker) == []  # full: 3 holders under a limit of 2, nothing more starts
    assert broker.ack(first, 60)  # its end gives its slot back, as every end does
    assert running(redis_ns, "limits.Capped") == sorted([second.id, fourth])


def test_rate__a_booking_refused_by_a_wrong_scheduled_key_changes_nothing(
    redis_ns: RedisNamespace,
) -> None:
    # dequeue books a task over its rate in a later window, filed in the scheduled set: a
    # scheduled key of another type leaves the task pending (the queue skipped, with a warning)
    # and must leave no booking written, or every later dequeue books once more.
    broker = limited_broker()
    k = keys(redis_ns)
    for _ in range(3):  # a second turning between the enqueues and the fetch starts it again
        redis_ns.cleanup()
        window = window_of(redis_ns, 1)
        paced = enqueue(Paced, 3)  # "2/s": the third is over the rate
        taken = fetch(broker, 2)
        redis_ns.client.set(k.scheduled, "by hand")
        before = redis_ns.client.hgetall(k.rate("limits.Paced"))
        later = [fetch(broker, 1) for _ in range(3)]
        if window_of(redis_ns, 1) == window:
            break
    assert len(taken) == 2
    assert later == [[], [], []]

    assert redis_ns.client.hgetall(k.rate("limits.Paced")) == before
    assert record(redis_ns, paced[2])["state"] == "pending"


def test_rate__a_task_handed_back_gives_its_start_back(redis_ns: RedisNamespace) -> None:
    # The strict-priority fetch (broker/fetch.py) takes from the queue it last took from, then
    # hands back what it took there when a higher queue had a task: that task did not run, so
    # its start must not count against its job type's rate_limit.
    broker = limited_broker()
    order = ("default", "low")
    paced = Paced.enqueue(Item(0), queue="low").id
    for n in range(2):
        Free.enqueue(Item(n), queue="default")
        broker._leads[order] = 1  # low was the lead: its task is taken first, then handed back
        (got,) = broker.dequeue_many(list(order), 1)
        assert got.queue == "default"
    low = QueueKeys(redis_ns.namespace, "low")

    assert redis_ns.client.hget(low.rate("limits.Paced"), "started") in (None, b"0")
    assert redis_ns.client.hget(low.task(paced), "state") == b"pending"
    assert "rated" not in {f.decode() for f in redis_ns.client.hkeys(low.task(paced))}
