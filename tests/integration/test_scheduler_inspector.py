"""The Inspector's schedules API (what the admin's Schedules page and the API serve): list,
one, history, run now, pause/resume, UnknownSchedule; on the real Redis."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from django_jobs.client import get_broker
from django_jobs.exceptions import UnknownSchedule
from django_jobs.inspector import Inspector
from django_jobs.keys import State
from django_jobs.schedules.firing import HISTORY
from django_jobs.worker.scheduler import Scheduler
from tests.conftest import RedisNamespace

SYNC = {"job": "probes.Noop", "every": 30, "payload": {"n": 2}}


@pytest.fixture
def inspector(redis_ns: RedisNamespace, settings: Any) -> Inspector:
    settings.JOBS = {**settings.JOBS, "SCHEDULE": {"sync": SYNC}}
    return Inspector(get_broker())


def test_inspector_schedules__configured_with_next_fire_and_no_last(inspector: Inspector) -> None:
    before = get_broker().time()
    (info,) = inspector.schedules()
    assert (info.name, info.job, info.expression, info.words, info.timezone) == (
        "sync", "probes.Noop", "every 30 seconds", "every 30 seconds", "UTC",
    )  # fmt: skip
    assert info.next_fire_at is not None
    assert info.next_fire_at.timestamp() % 30 == 0
    assert 0 < info.next_fire_at.timestamp() - before <= 30
    assert (info.last_fire_at, info.last_task_id, info.paused) == (None, None, False)


def test_inspector_schedule__unknown_name(inspector: Inspector) -> None:
    with pytest.raises(UnknownSchedule, match=r"'nope'.* are sync"):
        inspector.schedule("nope")
    with pytest.raises(UnknownSchedule):
        inspector.run_schedule_now("nope")


def test_inspector_run_schedule_now__enqueues_and_records_the_task(inspector: Inspector) -> None:
    task_id = inspector.run_schedule_now("sync")
    broker = get_broker()
    assert broker.task_state("default", task_id) == State.PENDING
    info = inspector.schedule("sync")
    assert (info.last_task_id, info.last_task_queue) == (task_id, "default")
    assert info.last_fire_at is not None
    (fire,) = inspector.fire_history("sync")
    assert (fire.task_id, fire.queue, fire.fire_time) == (task_id, "default", None)
    assert abs(fire.fired_at.timestamp() - broker.time()) < 5


def test_inspector_fire_history__newest_first_and_bounded(inspector: Inspector) -> None:
    ids = [inspector.run_schedule_now("sync") for _ in range(HISTORY + 5)]
    history = inspector.fire_history("sync")
    assert [f.task_id for f in history] == ids[::-1][:HISTORY]


def test_inspector_pause_schedule__paused_has_no_next_fire_and_does_not_fire(
    inspector: Inspector, redis_ns: RedisNamespace
) -> None:
    inspector.pause_schedule("sync")
    info = inspector.schedule("sync")
    assert (info.paused, info.next_fire_at) == (True, None)
    now = get_broker().time()
    fire_time = (now // 30) * 30
    scheduler = Scheduler(get_broker(), clock=lambda: fire_time + 0.01)
    scheduler.tick()
    assert inspector.fire_history("sync") == []
    inspector.resume_schedule("sync")
    assert inspector.schedule("sync").paused is False
    scheduler.clock = lambda: fire_time + 30.01
    scheduler.tick()
    (fire,) = inspector.fire_history("sync")
    assert fire.fire_time == datetime.fromtimestamp(fire_time + 30, UTC)


def test_run_schedule_now__the_job_s_default_queue_hook_decides_its_queue(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    """A job whose queue comes from `default_queue()` (as the mail jobs' JOBS['EMAIL_QUEUE'])
    is fired onto that queue, as its enqueue would send it, not onto its `queue` attribute."""
    from dataclasses import dataclass

    from django_jobs import Job
    from django_jobs.jobs import registry

    @dataclass
    class Empty:
        pass

    class LowByHook(Job[Empty]):
        name = "tests.LowByHook"

        @classmethod
        def default_queue(cls) -> str:
            return "low"

        def run(self, payload: Empty) -> None:
            pass

    try:
        settings.JOBS = {**settings.JOBS, "SCHEDULE": {"s": {"job": LowByHook.name, "every": 30}}}
        task_id = Inspector(get_broker()).run_schedule_now("s")
        assert get_broker().task_state("low", task_id) == State.PENDING
    finally:
        registry.jobs.pop(LowByHook.name, None)
