"""Schedules whose job goes to a sharded queue (issue 20): each fire's task goes to a shard of
the queue (the next one, or the one its fire key hashes to), so what the scheduler reads and
cleans of a fire looks at every shard: overlap=False finds the previous fire's task on its
shard, and a removed schedule leaves no fire key on any shard.

Red before the fix: overlap=False looked on the first shard only (4 tasks fired while the first
was pending), and forgetting a schedule scanned only its latest fire's shard."""

from __future__ import annotations

import logging

import pytest

from django_jobs.client import get_broker
from django_jobs.keys import tagged_queue
from django_jobs.worker.scheduler import Scheduler
from tests.conftest import RedisNamespace
from tests.integration.test_scheduler import T0, Clock, every
from tests.integration.test_shards import NAMES, pending, per_shard
from tests.integration.test_shards import sharded as sharded  # a fixture


def where(ns: RedisNamespace, task_id: str) -> str:
    (shard,) = [name for name in NAMES if task_id in pending(ns, name)]
    return shard


def test_overlap_false__skips_while_the_previous_task_is_pending_on_any_shard(
    sharded: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(T0 + 0.01)
    scheduler = Scheduler(get_broker(), {"tick": every(1, overlap=False)}, clock)
    scheduler.tick()
    ((first,),) = [ids for ids in (pending(sharded, n) for n in NAMES) if ids]
    assert where(sharded, first) != NAMES[0]  # so that a look at the first shard misses it
    state = get_broker().schedule_states(["tick"])["tick"]
    assert (state.last_task_id, state.last_task_queue) == (first, "default")

    with caplog.at_level(logging.WARNING, "django_jobs.worker.scheduler"):
        for step in range(1, 8):  # seven fire times while the first task waits on its shard
            clock.now = T0 + step + 0.01
            scheduler.tick()

    assert sum(per_shard(sharded).values()) == 1
    assert caplog.text.count(f"({first}) has not finished") == 7
    # Once it is gone (as after an ack with no retention), the next fire time fires.
    shard = where(sharded, first)
    sharded.client.delete(get_broker().keys(shard).task(first))
    sharded.client.lrem(get_broker().keys(shard).pending, 0, first)
    clock.now = T0 + 8.01
    scheduler.tick()
    assert sum(per_shard(sharded).values()) == 1
    assert get_broker().schedule_states(["tick"])["tick"].last_fire == T0 + 8


def test_forget_schedules__a_removed_schedule_leaves_no_fire_key_on_any_shard(
    sharded: RedisNamespace,
) -> None:
    clock = Clock(T0 + 0.01)
    configured = {"kept": every(1, "kept"), "gone": every(60, "gone")}
    scheduler = Scheduler(get_broker(), configured, clock)
    for step in range(8):
        clock.now = T0 + 60 * step + 0.01
        scheduler.tick()
    fire_keys = [k for k in sharded.keys() if ":idem:" in k and ":schedule:gone:" in k]
    assert len(fire_keys) >= 6  # the first fire time may pass before the schedule existed
    assert len({tagged_queue(k) for k in fire_keys}) > 1  # on several shards

    Scheduler(get_broker(), {"kept": every(1, "kept")}, clock).tick()  # the next worker start

    assert [k for k in sharded.keys() if "schedule:gone" in k] == []
    assert any(":schedule:kept:" in k for k in sharded.keys() if ":idem:" in k)
