"""What users see of a sharded queue (issue 20), past the counts test_shards.py checks: the
worker registry's running tasks name their queue (the inspector, the API overview, the admin's
workers page and its links), and a sharded queue's tasks listed by page, the inspector's and the
admin's, are in time order across its shards.

Red before the fix: running tasks showed their shard ("default#29"), whose admin link is a 404;
pages went through the shards one after the other, so "newest first" began with the first
shard's newest, not the queue's."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from django.urls import reverse

from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace
from tests.integration.test_shards import NAMES, SHARDS, Hot, Item, served
from tests.integration.test_shards import sharded as sharded  # a fixture

TASKS = reverse("admin:django_jobs_task_changelist")


def enqueued(count: int) -> list[str]:
    """The ids of `count` tasks enqueued one by one on default (over its shards, in turn),
    oldest first; their enqueue times increase (Redis' clock, to the microsecond)."""
    ids = [Hot.enqueue(Item(n)).id for n in range(count)]
    times = []
    for task_id in ids:
        info = get_inspector().task("default", task_id)
        assert info is not None
        assert info.enqueued_at is not None
        times.append(info.enqueued_at)
    assert all(a < b for a, b in itertools.pairwise(times))
    return ids


@pytest.mark.django_db
def test_workers__running_tasks_name_their_queue_not_their_shard(
    sharded: RedisNamespace, admin_client: Any
) -> None:
    for n in range(SHARDS):
        Hot.enqueue(Item(n))
    running = get_broker().dequeue_many(served(), SHARDS)
    assert {d.queue for d in running} == set(NAMES)  # one on each shard
    info = {"host": "h", "pid": 1, "queues": "critical,default,low", "concurrency": SHARDS}
    Heartbeat(get_broker(), "w1", info, lambda: running).tick()

    (worker,) = get_inspector().workers()
    overview = admin_client.get("/api/v1/admin/jobs").json()
    page = admin_client.get(reverse("admin:django_jobs_worker_changelist")).content.decode()

    assert sorted(t.id for t in worker.tasks) == sorted(d.id for d in running)
    assert {(t.queue, t.job) for t in worker.tasks} == {("default", Hot.name)}
    (api_worker,) = overview["workers"]
    assert {t["queue"] for t in api_worker["tasks"]} == {"default"}
    assert "default#" not in page
    links = re.findall(r'href="([^"]*/task/default[^"]*)"', page)
    assert len(links) == SHARDS
    for link in links:  # each task's page, found on its shard
        answer = admin_client.get(link)
        assert answer.status_code == 200, link
        assert "active" in answer.content.decode()


@pytest.mark.parametrize("newest_first", [True, False], ids=["newest", "oldest"])
def test_inspector_tasks__pages_of_a_sharded_queue_are_in_time_order_across_shards(
    sharded: RedisNamespace, newest_first: bool
) -> None:
    ids = enqueued(3 * SHARDS)  # 3 on each shard
    expected = ids[::-1] if newest_first else ids
    insp = get_inspector()

    pages = [
        insp.tasks("default", State.PENDING, page=p, per_page=5, newest_first=newest_first)
        for p in range(1, 5)
    ]

    assert [[t.id for t in p.items] for p in pages] == [
        expected[0:5], expected[5:10], expected[10:12], [],
    ]  # fmt: skip
    assert [p.has_next for p in pages] == [True, True, False, False]
    assert {p.total for p in pages} == {3 * SHARDS}
    assert {t.queue for p in pages for t in p.items} == {"default"}


@pytest.mark.django_db
@pytest.mark.parametrize("order", ["", "&o=oldest"], ids=["newest", "oldest"])
def test_admin_task_list__a_sharded_queue_is_in_time_order_across_shards(
    sharded: RedisNamespace, admin_client: Any, order: str
) -> None:
    ids = enqueued(3 * SHARDS)
    expected = ids if order else ids[::-1]

    html = admin_client.get(f"{TASKS}?queue=default&state=pending{order}").content.decode()

    shown = sorted(ids, key=html.index)
    assert shown == expected
    assert "default#" not in html


@pytest.mark.django_db
def test_admin_task_list__a_full_page_of_a_sharded_queue_with_a_chunk_on_each_shard(
    sharded: RedisNamespace, admin_client: Any
) -> None:
    for batch in range(SHARDS):  # a batch is one shard: more than a chunk (100) on each
        Hot.enqueue_many([Item(1000 * batch + n) for n in range(110)])
    newest = [t.id for t in get_inspector().tasks("default", State.PENDING, per_page=100).items]

    html = admin_client.get(f"{TASKS}?queue=default&state=pending").content.decode()

    shown = re.findall(r'href="[^"]*/task/default/([0-9a-f]{32})/"', html)
    assert list(dict.fromkeys(shown)) == newest  # the page full, in time order
    assert "?queue=default&amp;state=pending&amp;at=" in html  # and a link to go on


def test_inspector_tasks__a_sharded_queue_pages_10000_deep_at_most(
    sharded: RedisNamespace,
) -> None:
    insp = get_inspector()
    assert insp.tasks("default", State.PENDING, page=100, per_page=100).items == ()
    with pytest.raises(ValueError, match="list_tasks' next_offsets"):
        insp.tasks("default", State.PENDING, page=101, per_page=100)
