"""Schedules in real `runworker` processes: two and then four workers, each with its scheduler,
fire an `every: 1` schedule once per fire time (polled with a deadline, never slept)."""

from __future__ import annotations

from pathlib import Path

from django_jobs.client import get_broker
from tests.acceptance.conftest import Worker
from tests.conftest import RedisNamespace, wait_until

SCHEDULE = {"tick": {"job": "probes.Noop", "every": 1, "payload": {"n": 1}}}


def fired(ns: RedisNamespace) -> list[float]:
    """The fire time of every task the schedule enqueued (from its idempotency key), sorted."""
    prefix = f"{ns.namespace}:{{default}}:idem:probes.Noop:schedule:tick:"
    return sorted(float(key.decode()[len(prefix) :]) for key in ns.client.keys(prefix + "*"))


def task_count(ns: RedisNamespace) -> int:
    return len(ns.client.keys(f"{ns.namespace}:{{default}}:t:*"))


def test_runworker__two_then_four_schedulers_fire_each_time_once(
    redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    workers = [
        Worker(redis_ns.url, redis_ns.namespace, tmp_path / f"worker{i}.log") for i in range(4)
    ]
    try:
        for w in workers[:2]:
            w.start("--concurrency", "1", SCHEDULE=SCHEDULE)
        wait_until(lambda: len(fired(redis_ns)) >= 10, timeout=40, why=workers[0].output)
        for w in workers[2:]:
            w.start("--concurrency", "1", SCHEDULE=SCHEDULE)
        count = len(fired(redis_ns))
        wait_until(lambda: len(fired(redis_ns)) >= count + 10, timeout=40, why=workers[2].output)
    finally:
        for w in workers:
            w.kill()
    times = fired(redis_ns)
    # Every fire time from the first to the last, each once: one task each, no gap.
    assert times == [times[0] + i for i in range(len(times))]
    assert task_count(redis_ns) == len(times)
    history = get_broker().fire_history("tick", 50)
    assert sorted(f.fire_time.timestamp() for f in history if f.fire_time) == times[-len(history) :]
    for w in workers:
        assert "Traceback" not in w.output(), w.output()
