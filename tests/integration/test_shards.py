"""Sharded queues against the real Redis (issue 20; django_jobs/broker/shards.py): a queue of
JOBS["QUEUES"] with {"shards": N} is N queues in Redis, each on a slot of its own, and one queue
everywhere users see it (enqueue, handles, the inspector, the admin API, the CLI, run_burst).

The fetch's fairness and round trips are counted here: while every shard has work, a fetch is
one round trip and the lead moves to the next shard after each (broker/fetch.py)."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_jobs import CancelOutcome, DuplicateJob, Job, cancel
from django_jobs.broker.shards import shard_names, shards_for
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from django_jobs.testing import run_burst
from tests.cluster_audit import recording
from tests.conftest import RedisNamespace
from tests.integration.test_fetch_rounds import (
    Rounds,
    ack,
    rounds,  # noqa: F401 (a fixture, for `trips`)
)

SHARDS = 4
QUEUES = {"critical": {}, "default": {"shards": SHARDS}, "low": {}}
NAMES = shard_names("default", SHARDS)

ran: list[tuple[str, str]] = []


@dataclass(frozen=True)
class Item:
    n: int


class Hot(Job[Item]):
    queue = "default"

    def run(self, payload: Item) -> None:
        ran.append((self.context.queue, str(payload.n)))


class Urgent(Job[Item]):
    queue = "critical"

    def run(self, payload: Item) -> None:
        ran.append((self.context.queue, str(payload.n)))


class Broken(Job[Item]):
    queue = "default"
    max_attempts = 1

    def run(self, payload: Item) -> None:
        raise RuntimeError("broken")


@pytest.fixture
def sharded(redis_ns: RedisNamespace, settings: Any) -> RedisNamespace:
    settings.JOBS = {**settings.JOBS, "QUEUES": QUEUES}
    ran.clear()
    return redis_ns


def pending(ns: RedisNamespace, queue: str) -> list[str]:
    return [i.decode() for i in ns.client.lrange(f"{ns.namespace}:{{{queue}}}:pending", 0, -1)]


def per_shard(ns: RedisNamespace) -> dict[str, int]:
    return {name: len(pending(ns, name)) for name in NAMES}


@pytest.fixture
def trips(sharded: RedisNamespace, request: pytest.FixtureRequest) -> Rounds:
    """test_fetch_rounds' count of the broker's round trips, on the sharded queues."""
    counter: Rounds = request.getfixturevalue("rounds")
    return counter


def served() -> list[str]:
    return list(shards_for(get_broker().settings).expand(["critical", "default", "low"]))


# -- enqueue ----------------------------------------------------------------------------------


def test_enqueue__tasks_spread_over_every_shard_and_stay_on_queue_default(
    sharded: RedisNamespace,
) -> None:
    handles = [Hot.enqueue(Item(n)) for n in range(4 * SHARDS)]

    assert per_shard(sharded) == dict.fromkeys(NAMES, 4)
    assert {h.queue for h in handles} == {"default"}
    assert {h.refresh() for h in handles} == {State.PENDING}
    assert not pending(sharded, "critical")


def test_enqueue_many__a_batch_is_one_shard_the_next_batch_the_next(
    sharded: RedisNamespace,
) -> None:
    for batch in range(SHARDS):
        Hot.enqueue_many([Item(10 * batch + n) for n in range(3)])

    assert per_shard(sharded) == dict.fromkeys(NAMES, 3)


def test_idempotency__a_keyed_task_is_on_its_keys_shard_in_one_round_trip(
    sharded: RedisNamespace, trips: Rounds
) -> None:
    shards = Counter()
    for n in range(24):
        trips.take()
        handle = Hot.enqueue(Item(n), idempotency_key=f"order-{n}")
        assert trips.take() == 1  # the key in the slot of the task's shard: no hand-off
        (shard,) = [name for name in NAMES if handle.id in pending(sharded, name)]
        key = get_broker().keys("default").idempotency(Hot.name, f"order-{n}")
        assert key.startswith(f"{sharded.namespace}:{{{shard}}}:idem:")
        shards[shard] += 1
    assert len(shards) == SHARDS  # the keys spread too


@pytest.mark.parametrize("second", ["default", "low", "critical"])
def test_idempotency__a_duplicate_key_is_refused_on_every_shard_and_queue(
    sharded: RedisNamespace, second: str
) -> None:
    for n in range(8):  # keys on every shard
        original = Hot.enqueue(Item(n), idempotency_key=f"k{n}")

        with pytest.raises(DuplicateJob) as refused:
            Hot.enqueue(Item(n), queue=second, idempotency_key=f"k{n}")

        assert (refused.value.original_id, refused.value.original_queue) == (
            original.id,
            "default",
        )
    assert sum(per_shard(sharded).values()) == 8
    assert (pending(sharded, "low"), pending(sharded, "critical")) == ([], [])


def test_idempotency__a_key_taken_on_another_queue_is_refused_on_the_sharded_one(
    sharded: RedisNamespace,
) -> None:
    for n in range(8):
        original = Hot.enqueue(Item(n), queue="low", idempotency_key=f"x{n}")  # handed off
        with pytest.raises(DuplicateJob) as refused:
            Hot.enqueue(Item(n), idempotency_key=f"x{n}")
        assert (refused.value.original_id, refused.value.original_queue) == (original.id, "low")
    assert len(pending(sharded, "low")) == 8
    assert sum(per_shard(sharded).values()) == 0


# -- fetch --------------------------------------------------------------------------------


def test_fetch__every_shard_is_drained_in_turn_one_round_trip_each(
    sharded: RedisNamespace, trips: Rounds
) -> None:
    for n in range(8 * SHARDS):
        Hot.enqueue(Item(n))
    broker = get_broker()
    queues = served()
    (task,) = broker.dequeue_many(queues, 1)
    taken = [task.queue]
    trips.take()
    counts = []
    while True:
        written, fetched = broker.settle([ack(task)], queues, 1)
        assert written == [True]
        counts.append(trips.take())
        if not fetched:
            break
        (task,) = fetched
        taken.append(task.queue)
        # No shard starves: after every fetch, no shard is more than one task ahead.
        spread = Counter(taken)
        assert max(spread.values()) - min(spread[name] for name in NAMES) <= 1, spread

    assert Counter(taken) == dict.fromkeys(NAMES, 8)
    # One round trip per fetch while the next shard has work (the critical queue's EXISTS and
    # the shard's dequeue, with the ack before), two for the last (every queue looked at).
    assert counts[:-1] == [1] * (len(taken) - 1)
    assert counts[-1] == 2


def test_fetch__several_at_once_take_from_the_next_shards_in_turn(sharded: RedisNamespace) -> None:
    for n in range(2 * SHARDS):  # two on each shard
        Hot.enqueue(Item(n))
    broker = get_broker()

    batches = [broker.dequeue_many(served(), 3) for _ in range(3)]

    assert [len(batch) for batch in batches] == [3, 3, 2]
    assert Counter(d.queue for batch in batches for d in batch) == dict.fromkeys(NAMES, 2)
    assert all(len({d.queue for d in batch}) >= 2 for batch in batches)  # not one shard's


def test_fetch__a_critical_task_goes_before_any_shard_and_low_waits_for_all(
    sharded: RedisNamespace,
) -> None:
    for n in range(2 * SHARDS):
        Hot.enqueue(Item(n))
    Hot.enqueue(Item(99), queue="low")
    broker = get_broker()
    queues = served()
    taken = [d.queue for d in broker.dequeue_many(queues, 1)]
    taken += [d.queue for d in broker.dequeue_many(queues, 1)]
    Urgent.enqueue(Item(1))

    taken += [d.queue for _ in range(2 * SHARDS) for d in broker.dequeue_many(queues, 1)]

    assert taken[2] == "critical"
    assert taken[-1] == "low"
    assert Counter(taken[:-1]) == {"critical": 1, **dict.fromkeys(NAMES, 2)}


def test_worker__run_burst_drains_every_shard_and_the_job_sees_queue_default(
    sharded: RedisNamespace,
) -> None:
    for n in range(3 * SHARDS):
        Hot.enqueue(Item(n))
    Urgent.enqueue(Item(100))

    outcomes = run_burst()

    assert len(outcomes) == 3 * SHARDS + 1
    assert {o.queue for o in outcomes} == {"critical", "default"}
    assert ran[0] == ("critical", "100")
    assert sorted(int(n) for q, n in ran[1:] if q == "default") == list(range(3 * SHARDS))
    assert per_shard(sharded) == dict.fromkeys(NAMES, 0)


# -- what users see -----------------------------------------------------------------------


def test_inspector__a_sharded_queue_is_one_queue_its_counts_the_sums(
    sharded: RedisNamespace,
) -> None:
    handles = [Hot.enqueue(Item(n)) for n in range(2 * SHARDS)]
    insp = get_inspector()

    default = next(q for q in insp.queues() if q.name == "default")
    assert default.pending == 2 * SHARDS
    assert [q.name for q in insp.queues()] == ["critical", "default", "low"]
    page = insp.tasks("default", State.PENDING, per_page=3, page=2)
    assert (page.total, len(page.items), page.has_next) == (2 * SHARDS, 3, True)
    assert {t.queue for t in page.items} == {"default"}
    listed = insp.list_tasks(State.PENDING, ("default",), per_page=100)
    assert sorted(t.id for t in listed.items) == sorted(h.id for h in handles)
    assert {t.queue for t in listed.items} == {"default"}
    found = insp.task("default", handles[-1].id)
    assert (found and found.queue) == "default"
    assert insp.find(handles[1].id) is not None
    assert insp.locate([h.id for h in handles]) == {h.id: "default" for h in handles}


def test_inspector__pages_by_number_list_every_task_of_the_shards_once(
    sharded: RedisNamespace,
) -> None:
    handles = [Hot.enqueue(Item(n)) for n in range(10)]  # 3, 3, 2 and 2 on the shards
    # (merged on the time: test_shards_views.py checks the order)
    insp = get_inspector()

    pages = [insp.tasks("default", State.PENDING, page=p, per_page=3) for p in range(1, 6)]

    assert [len(p.items) for p in pages] == [3, 3, 3, 1, 0]
    assert [p.has_next for p in pages] == [True, True, True, False, False]
    assert {p.total for p in pages} == {10}
    listed = [t.id for p in pages for t in p.items]
    assert sorted(listed) == sorted(h.id for h in handles)  # each once


def test_handles__refresh_and_cancel_find_the_task_on_its_shard(sharded: RedisNamespace) -> None:
    handles = [Hot.enqueue(Item(n)) for n in range(SHARDS)]  # one on each shard

    outcomes = [h.cancel() for h in handles[:-1]] + [cancel(handles[-1].id)]

    assert outcomes == [CancelOutcome.CANCELED] * SHARDS
    assert [h.refresh() for h in handles] == [State.CANCELED] * SHARDS
    assert per_shard(sharded) == dict.fromkeys(NAMES, 0)


def test_inspector__pause_pauses_every_shard_and_resume_resumes_them(
    sharded: RedisNamespace,
) -> None:
    for n in range(SHARDS):
        Hot.enqueue(Item(n))
    insp = get_inspector()

    insp.pause("default")

    assert all(sharded.client.exists(f"{sharded.namespace}:{{{n}}}:paused") for n in NAMES)
    assert next(q for q in insp.queues() if q.name == "default").paused
    assert get_broker().dequeue_many(served(), SHARDS) == []
    insp.resume("default")
    assert not any(sharded.client.exists(f"{sharded.namespace}:{{{n}}}:paused") for n in NAMES)
    assert len(get_broker().dequeue_many(served(), SHARDS)) == SHARDS


def test_inspector__retry_all_delete_and_purge_reach_every_shard(sharded: RedisNamespace) -> None:
    handles = [Broken.enqueue(Item(n)) for n in range(2 * SHARDS)]
    run_burst()
    insp = get_inspector()
    assert next(q for q in insp.queues() if q.name == "default").dead == 2 * SHARDS

    assert insp.retry_all_dead("default") == 2 * SHARDS
    assert sum(per_shard(sharded).values()) == 2 * SHARDS
    assert insp.delete("default", handles[0].id)
    assert insp.purge("default", State.PENDING) == 2 * SHARDS - 1
    assert sum(per_shard(sharded).values()) == 0


@pytest.mark.django_db  # the CLI's stats read the outbox's table
def test_api_and_cli__counts_are_the_sums_over_the_shards(
    sharded: RedisNamespace, admin_client: Any
) -> None:
    handles = [Hot.enqueue(Item(n), idempotency_key=f"key-{n}") for n in range(2 * SHARDS)]

    overview = admin_client.get("/api/v1/admin/jobs").json()
    out = io.StringIO()
    call_command("jobs", "stats", "--json", stdout=out, stderr=io.StringIO())
    stats = json.loads(out.getvalue())
    page = admin_client.get(reverse("admin:django_jobs_queue_changelist")).content.decode()

    for queues in (overview["queues"], stats["queues"]):
        by_name = {q["name"]: q for q in queues}
        assert list(by_name) == ["critical", "default", "low"]
        assert by_name["default"]["pending"] == 2 * SHARDS
    assert ("default#" in page, "default" in page) == (False, True)
    tasks = reverse("admin:django_jobs_task_changelist")
    for query in ("", "&q=key-"):  # paged by number; merged through the cursor (a search)
        listing = admin_client.get(f"{tasks}?queue=default&state=pending{query}").content.decode()
        assert all(h.id in listing for h in handles), query
        assert "default#" not in listing


@pytest.mark.django_db
def test_api__pages_a_sharded_queue_through_its_cursor_and_acts_on_every_shard(
    sharded: RedisNamespace, admin_client: Any
) -> None:
    handles = [Hot.enqueue(Item(n)) for n in range(3 * SHARDS)]
    seen: list[str] = []
    url: str | None = "/api/v1/admin/jobs/tasks?state=pending&queue=default&per_page=5"
    while url:
        page = admin_client.get(url).json()
        assert {t["queue"] for t in page["results"]} == {"default"}
        seen += [t["id"] for t in page["results"]]
        url = page["next"]
    assert sorted(seen) == sorted(h.id for h in handles)  # each once, across the shards

    task = admin_client.get(f"/api/v1/admin/jobs/{handles[-1].id}").json()
    assert (task["id"], task["queue"]) == (handles[-1].id, "default")
    assert admin_client.post("/api/v1/admin/jobs/queues/default/pause").status_code in (200, 204)
    assert all(sharded.client.exists(f"{sharded.namespace}:{{{n}}}:paused") for n in NAMES)


def test_every_call_on_sharded_queues__names_keys_of_one_cluster_slot(
    sharded: RedisNamespace,
) -> None:
    broker, insp = get_broker(), get_inspector()
    with recording() as audit:
        for n in range(SHARDS):
            Hot.enqueue(Item(n))
            Hot.enqueue(Item(n), idempotency_key=f"k{n}")  # on its key's shard
            Hot.enqueue(Item(n), queue="low", idempotency_key=f"away{n}")  # a hand-off
            Urgent.enqueue(Item(n), idempotency_key=f"u{n}")  # homed on critical
        Hot.enqueue_many([Item(n) for n in range(3)])
        for shard in shards_for(broker.settings).expand(["default"]):
            broker.finish_handoffs(shard, grace=0)
        (task,) = broker.dequeue_many(served(), 1)
        for _ in range(6):
            _written, (task,) = broker.settle([ack(task)], served(), 1)
        insp.queues()
        insp.tasks("default", State.PENDING, per_page=5)
        insp.list_tasks(State.PENDING, ("default",), job=Hot.name)
        insp.pause("default")
        insp.resume("default")
        insp.purge("default", State.PENDING)

    spanning = {name: found for name, found in audit.spanning().items() if name != "BLPOP"}
    assert spanning == {}, spanning
    assert {"enqueue", "enqueue_many", "handoff", "dequeue", "ack", "delete"} <= set(audit.seen)
