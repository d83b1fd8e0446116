"""Django's tasks framework on a sharded queue (issues 18 and 20): a task's run record (its
start, worker ids, return value: broker/results.py) is written on the shard its task is on, in
its record's slot, and get_result reads it there, whichever shard the task went to.

Red before the fix: the run wrote its record under {default} (JobContext.queue, the queue of
ours) while get_result read it on the task's shard: a task on any shard but the first read
itself READY while it ran, and READY with no start once it had run."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="Django's tasks framework (django.tasks) needs Django 6.0 or later"
)

from django.tasks import TaskResultStatus

from django_jobs.client import get_broker
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace
from tests.integration.test_shards import NAMES, SHARDS, per_shard
from tests.integration.test_shards import sharded as sharded  # a fixture
from tests.shards_tasks_funcs import own_status


def test_get_result__a_task_on_any_shard_reads_itself_running_then_its_outcome(
    sharded: RedisNamespace,
) -> None:
    results = [own_status.enqueue() for _ in range(SHARDS)]
    assert per_shard(sharded) == dict.fromkeys(NAMES, 1)  # one on each shard

    run_burst()

    finished = [own_status.get_result(r.id) for r in results]
    assert [f.return_value for f in finished] == ["RUNNING"] * SHARDS
    assert {f.status for f in finished} == {TaskResultStatus.SUCCESSFUL}
    assert all(f.started_at is not None and len(f.worker_ids) == 1 for f in finished)
    # Each run record is in its task's slot: {default#<n>}:dt:<id> beside {default#<n>}:t:<id>.
    broker = get_broker()
    for r in results:
        (shard,) = [n for n in NAMES if sharded.client.exists(broker.keys(n).task(r.id))]
        assert sharded.client.exists(f"{broker.keys(shard).prefix}:dt:{r.id}")
