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

from django_jobs.broker.connection import connect
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
        message = decode(ns.client.hget(broker.keys(Q).task(task_id), "msg"))
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
