"""The scheduler loop on the real Redis, with a fake Redis-time source (a clock the test moves):
racing workers' schedulers (threads, each with its own connection), missed fire times, pause,
overlap, a removed schedule's keys, and DST days."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from django_jobs.broker.factory import connect
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.keys import schedule as schedule_key
from django_jobs.message import decode
from django_jobs.schedules import CATCH_UP_LIMIT, Schedule
from django_jobs.worker.scheduler import Scheduler
from tests.conftest import RedisNamespace

Q = "default"
#: A fire time of an every-1 schedule, far from now (the fake clock starts here).
T0 = 1_900_000_000.0


class Clock:
    """A fake Redis clock: epoch seconds the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def every(seconds: float, name: str = "tick", **options: Any) -> Schedule:
    return Schedule(name=name, job="probes.Noop", every=seconds, payload={"n": 1}, **options)


def tasks(ns: RedisNamespace) -> list[tuple[str, str | None]]:
    """The (task id, idempotency key) of every task enqueued on Q, oldest first."""
    broker = get_broker()
    ids = [raw.decode() for raw in ns.client.lrange(broker.keys(Q).pending, 0, -1)][::-1]
    out = []
    for task_id in ids:
        message = decode(ns.client.hget(broker.keys(Q).task(task_id), "msg"), task_id, Q)
        out.append((task_id, message.idempotency_key))
    return out


def fire_times(ns: RedisNamespace) -> list[float]:
    """The fire time of each task enqueued, oldest first (from its idempotency key)."""
    return [float(str(key).split(":")[2]) for _, key in tasks(ns)]


@pytest.fixture
def brokers(redis_ns: RedisNamespace) -> Iterator[list[RedisBroker]]:
    """Four brokers, each on its own connection pool, as four workers have."""
    settings = get_broker().settings
    made = [RedisBroker(connect(redis_ns.url, 5.0), settings) for _ in range(4)]
    yield made
    for broker in made:
        broker.client.close()


@pytest.mark.parametrize("workers", [2, 4])
def test_scheduler__racing_workers_fire_each_time_once(
    brokers: list[RedisBroker], redis_ns: RedisNamespace, workers: int
) -> None:
    clock = Clock(T0)
    schedulers = [Scheduler(b, {"tick": every(1)}, clock) for b in brokers[:workers]]
    barrier = threading.Barrier(workers)

    def race(scheduler: Scheduler) -> None:
        for _ in range(3):  # each worker ticks three times per fire time
            barrier.wait()
            scheduler.tick()

    for step in range(12):
        clock.now = T0 + step + 0.001 * step  # a little late, as a real tick is
        threads = [threading.Thread(target=race, args=(s,)) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert fire_times(redis_ns) == [T0 + step for step in range(12)]
    assert len({task_id for task_id, _ in tasks(redis_ns)}) == 12


def test_scheduler__all_workers_down_for_three_fire_times_enqueue_once(
    brokers: list[RedisBroker], redis_ns: RedisNamespace
) -> None:
    clock = Clock(T0 + 0.01)
    first = [Scheduler(b, {"tick": every(1)}, clock) for b in brokers[:2]]
    for s in first:
        s.tick()
    assert fire_times(redis_ns) == [T0]
    clock.now = T0 + 4.2  # T0+1, +2 and +3 missed; T0+4 is the newest
    back = [Scheduler(b, {"tick": every(1)}, clock) for b in brokers[2:]]
    for s in back:
        s.tick()
    assert fire_times(redis_ns) == [T0, T0 + 4]


def test_scheduler__catch_up_all_enqueues_the_newest_missed_up_to_its_bound(
    brokers: list[RedisBroker], redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(T0 + 0.01)
    scheduler = Scheduler(brokers[0], {"tick": every(1, catch_up="all")}, clock)
    scheduler.tick()
    clock.now = T0 + 3.5
    scheduler.tick()
    assert fire_times(redis_ns) == [T0, T0 + 1, T0 + 2, T0 + 3]
    clock.now = T0 + 3 + CATCH_UP_LIMIT + 50.5
    with caplog.at_level(logging.WARNING, "django_jobs.worker.scheduler"):
        scheduler.tick()
    newest = [T0 + 3 + 51 + i for i in range(CATCH_UP_LIMIT)]
    assert fire_times(redis_ns) == [T0, T0 + 1, T0 + 2, T0 + 3, *newest]
    assert f"missed more than {CATCH_UP_LIMIT} fire times" in caplog.text


def test_scheduler__catch_up_none_skips_missed_fire_times(
    brokers: list[RedisBroker], redis_ns: RedisNamespace
) -> None:
    clock = Clock(T0 + 0.01)
    scheduler = Scheduler(brokers[0], {"tick": every(10, catch_up="none")}, clock)
    scheduler.tick()
    clock.now = T0 + 35  # T0+30 is 5 s old: half a period or more, missed
    scheduler.tick()
    clock.now = T0 + 40.2
    scheduler.tick()
    assert fire_times(redis_ns) == [T0, T0 + 40]


def test_scheduler__a_paused_schedule_fires_again_from_its_next_fire_time(
    brokers: list[RedisBroker], redis_ns: RedisNamespace
) -> None:
    clock = Clock(T0 + 0.01)
    scheduler = Scheduler(brokers[0], {"tick": every(1)}, clock)
    scheduler.tick()
    brokers[1].pause_schedule("tick")
    for step in (1, 2):
        clock.now = T0 + step + 0.01
        scheduler.tick()
    brokers[1].resume_schedule("tick")
    scheduler.tick()  # T0+2 passed while paused: not caught up
    clock.now = T0 + 3.01
    scheduler.tick()
    assert fire_times(redis_ns) == [T0, T0 + 3]


def test_scheduler__overlap_false_skips_while_the_previous_task_is_unfinished(
    brokers: list[RedisBroker], redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(T0 + 0.01)
    scheduler = Scheduler(brokers[0], {"tick": every(1, overlap=False)}, clock)
    scheduler.tick()
    ((first, _),) = tasks(redis_ns)
    clock.now = T0 + 1.01
    with caplog.at_level(logging.WARNING, "django_jobs.worker.scheduler"):
        scheduler.tick()
    assert fire_times(redis_ns) == [T0]
    assert "skipped" in caplog.text
    assert first in caplog.text
    # The first task finishes (its record goes, as after an ack with no retention).
    redis_ns.client.delete(get_broker().keys(Q).task(first))
    redis_ns.client.lrem(get_broker().keys(Q).pending, 0, first)
    clock.now = T0 + 2.01
    scheduler.tick()
    assert fire_times(redis_ns) == [T0 + 2]


def test_scheduler__a_removed_schedule_leaves_no_keys(
    brokers: list[RedisBroker], redis_ns: RedisNamespace
) -> None:
    clock = Clock(T0 + 0.01)
    Scheduler(brokers[0], {"kept": every(1, "kept"), "gone": every(1, "gone")}, clock).tick()
    ns = redis_ns.namespace
    assert any("schedule:gone:" in k for k in redis_ns.keys() if ":idem:" in k)
    assert (
        redis_ns.client.exists(schedule_key(ns, "gone"), f"{schedule_key(ns, 'gone')}:fires") == 2
    )
    Scheduler(brokers[1], {"kept": every(1, "kept")}, clock).tick()  # the next worker start
    assert [k for k in redis_ns.keys() if "gone" in k] == []
    assert redis_ns.client.smembers(f"{ns}:schedules") == {b"kept"}
    assert redis_ns.client.exists(schedule_key(ns, "kept")) == 1


def paris(*args: int) -> float:
    return datetime(*args, tzinfo=ZoneInfo("Europe/Paris")).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("start", "end", "fired"),
    [
        # Spring forward: 02:00 -> 03:00, so 02:30 does not exist; it fires once, at 03:00.
        ((2026, 3, 28, 12), (2026, 3, 29, 12), [(2026, 3, 29, 3)]),
        # Fall back: 03:00 -> 02:00, so 02:30 happens twice; it fires once, at the first.
        ((2026, 10, 24, 12), (2026, 10, 25, 12), [(2026, 10, 25, 2, 30)]),
    ],
)
def test_scheduler__a_daily_0230_job_fires_once_on_dst_days(
    brokers: list[RedisBroker],
    redis_ns: RedisNamespace,
    start: tuple[int, ...],
    end: tuple[int, ...],
    fired: list[tuple[int, ...]],
) -> None:
    nightly = Schedule(
        name="nightly", job="probes.Noop", cron="30 2 * * *", timezone="Europe/Paris",
        payload={"n": 1},
    )  # fmt: skip
    clock = Clock(paris(*start))
    scheduler = Scheduler(brokers[0], {"nightly": nightly}, clock)
    while clock.now < paris(*end):
        scheduler.tick()
        clock.now += 120  # a tick every two minutes of the fake clock, through the night
    assert fire_times(redis_ns) == [paris(*when) for when in fired]
