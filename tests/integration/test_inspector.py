"""The Inspector against a real Redis: depths, paging, corrupt records, and operator actions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

import pytest

from django_jobs import DuplicateJob, Job, UnknownQueue, inspector, keys
from django_jobs.broker.protocol import Deleted
from django_jobs.client import get_broker
from django_jobs.exceptions import TaskRunning
from django_jobs.inspector import Inspector, get_inspector
from django_jobs.keys import State
from django_jobs.message import Message, encode
from django_jobs.testing import run_burst
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace


@dataclass
class Note:
    text: str


class Noop(Job[Note]):
    def run(self, payload: Note) -> None:
        pass


class Fails(Job[Note]):
    max_attempts = 1

    def run(self, payload: Note) -> None:
        raise RuntimeError(f"boom {payload.text}")


class Flaky(Job[Note]):
    """Fails while `failing` is set; five attempts, so a first failure goes to retry."""

    failing: ClassVar[bool] = True
    max_attempts = 5

    def run(self, payload: Note) -> None:
        if self.failing:
            raise RuntimeError("not yet")


@pytest.fixture
def insp(redis_ns: RedisNamespace) -> Inspector:
    return get_inspector()


def ids(page: inspector.TaskPage) -> list[str]:
    return [item.id for item in page.items]


def depths(insp: Inspector, queue: str = "default") -> dict[str, int]:
    (info,) = [q for q in insp.queues() if q.name == queue]
    return {state: info.count(state) for state in State.ALL}


# -- queues ---------------------------------------------------------------------------------


def test_queues__counts_tasks_per_state(insp: Inspector) -> None:
    # Given one completed, one retry and one dead task (the runs are today's counters) ...
    Noop.enqueue(Note("done"))
    Flaky.enqueue(Note("again"))
    Fails.enqueue(Note("dead"))
    run_burst()
    # ... and one scheduled, one active and two pending.
    Noop.enqueue(Note("later"), delay=3600)
    for text in ("a", "b", "c"):
        Noop.enqueue(Note(text))
    assert get_broker().dequeue(["default"]) is not None

    queues = insp.queues()

    assert [q.name for q in queues] == ["critical", "default", "low"]
    critical, default, low = queues
    assert default == inspector.QueueInfo(
        name="default",
        paused=False,
        scheduled=1,
        pending=2,
        active=1,
        retry=1,
        dead=1,
        completed=1,
        processed_today=1,
        failed_today=2,
    )
    empty = dict.fromkeys(State.ALL, 0)
    assert (
        {s: critical.count(s) for s in State.ALL} == {s: low.count(s) for s in State.ALL} == empty
    )
    assert (low.paused, low.processed_today, low.failed_today) == (False, 0, 0)


def test_queues__count_rejects_unknown_state(insp: Inspector) -> None:
    with pytest.raises(ValueError, match="use one of scheduled, pending"):
        insp.queues()[0].count("archived")


# -- tasks ----------------------------------------------------------------------------------


def test_tasks__pages_pending_newest_first(insp: Inspector) -> None:
    handles = [Noop.enqueue(Note(str(n)), idempotency_key=f"k{n}") for n in range(5)]
    created = [h.id for h in handles]

    first = insp.tasks("default", State.PENDING, per_page=2)
    last = insp.tasks("default", State.PENDING, page=3, per_page=2)
    beyond = insp.tasks("default", State.PENDING, page=4, per_page=2)
    oldest = insp.tasks("default", State.PENDING, per_page=2, newest_first=False)

    assert (ids(first), first.total, first.page, first.has_next) == (
        [created[4], created[3]],
        5,
        1,
        True,
    )
    assert (ids(last), last.has_next) == ([created[0]], False)
    assert (beyond.items, beyond.total, beyond.has_next) == ((), 5, False)
    assert ids(oldest) == created[:2]
    item = first.items[0]
    assert (item.queue, item.state, item.job, item.payload) == (
        "default",
        "pending",
        Noop.name,
        {"text": "4"},
    )
    assert (item.attempts, item.crashes, item.max_attempts, item.idempotency_key) == (0, 0, 5, "k4")
    assert item.enqueued_at is not None
    assert item.enqueued_at.tzinfo is UTC
    assert abs((datetime.now(UTC) - item.enqueued_at).total_seconds()) < 60
    assert (item.started_at, item.next_at, item.died_at, item.error, item.decode_error) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_tasks__pages_sorted_set_by_score(insp: Inspector) -> None:
    soon, later, latest = (Noop.enqueue(Note(""), delay=d).id for d in (100, 200, 300))

    newest = insp.tasks("default", State.SCHEDULED, per_page=2)
    oldest = insp.tasks("default", State.SCHEDULED, per_page=2, newest_first=False)
    second = insp.tasks("default", State.SCHEDULED, page=2, per_page=2, newest_first=False)

    assert (ids(newest), newest.total, newest.has_next) == ([latest, later], 3, True)
    assert (ids(oldest), ids(second), second.has_next) == ([soon, later], [latest], False)
    assert newest.items[0].next_at is not None
    assert newest.items[0].next_at > newest.items[1].next_at  # type: ignore[operator]


def test_tasks__pages_through_100k_tasks(insp: Inspector, redis_ns: RedisNamespace) -> None:
    # Given 100,000 pending tasks written straight into the real key layout (ids 000000 up).
    broker = get_broker()
    k = broker.keys("default")
    count = 100_000
    pipe = broker.client.pipeline(transaction=False)
    for n in range(count):
        task_id = f"{n:06d}"
        message = Message(task_id, Noop.name, "default", {"text": str(n)}, 5, 300.0, 0.0)
        pipe.hset(k.task(task_id), mapping={"msg": encode(message), "state": "pending"})
        pipe.lpush(k.pending, task_id)
        if n % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()

    first = insp.tasks("default", State.PENDING, per_page=50)
    last = insp.tasks("default", State.PENDING, page=2000, per_page=50)
    oldest = insp.tasks("default", State.PENDING, per_page=50, newest_first=False)

    assert ids(first) == [f"{n:06d}" for n in range(99_999, 99_949, -1)]
    assert (first.total, first.has_next) == (count, True)
    assert ids(last) == [f"{n:06d}" for n in range(49, -1, -1)]
    assert (last.total, last.has_next) == (count, False)
    assert ids(oldest) == [f"{n:06d}" for n in range(50)]
    assert last.items[-1].payload == {"text": "0"}
    assert depths(insp)["pending"] == count


def test_tasks__lists_corrupt_records_with_decode_error(
    insp: Inspector, redis_ns: RedisNamespace
) -> None:
    good, bad_json, bad_utf8 = (Noop.enqueue(Note(t)).id for t in ("ok", "json", "utf8"))
    k = get_broker().keys("default")
    redis_ns.client.hset(k.task(bad_json), "msg", "{not json")
    redis_ns.client.hset(k.task(bad_utf8), "msg", b"\xff\xfe{")
    redis_ns.client.lpush(k.pending, "orphan")  # an id whose record is gone

    page = insp.tasks("default", State.PENDING)

    by_id = {item.id: item for item in page.items}
    assert list(by_id) == ["orphan", bad_utf8, bad_json, good]
    assert by_id[good].decode_error is None
    assert by_id[bad_json].decode_error is not None
    assert "not valid JSON" in by_id[bad_json].decode_error
    assert (by_id[bad_json].job, by_id[bad_json].payload, by_id[bad_json].raw) == (
        None,
        None,
        "{not json",
    )
    assert by_id[bad_json].enqueued_at is not None
    assert by_id[bad_utf8].decode_error is not None
    assert by_id[bad_utf8].raw == "\ufffd\ufffd{"
    assert by_id["orphan"].decode_error is not None
    assert by_id["orphan"].decode_error.startswith("no record: only its id is left")
    assert by_id["orphan"].state == "pending"
    assert insp.task("default", bad_utf8) == by_id[bad_utf8]


def test_tasks__corrupt_record_goes_dead_and_stays_listable(
    insp: Inspector, redis_ns: RedisNamespace
) -> None:
    task_id = Noop.enqueue(Note("x")).id
    redis_ns.client.hset(get_broker().keys("default").task(task_id), "msg", "[1, 2]")

    run_burst()

    (item,) = insp.tasks("default", State.DEAD).items
    assert (item.id, item.state, item.job) == (task_id, "dead", None)
    assert item.decode_error is not None
    assert item.error is not None
    assert "could not decode" in item.error
    assert insp.delete("default", task_id) is True
    assert depths(insp)["dead"] == 0


def test_tasks__record_key_of_another_type_is_listed_with_what_is_wrong(
    insp: Inspector, redis_ns: RedisNamespace
) -> None:
    good, broken = (Noop.enqueue(Note(t), delay=60).id for t in ("ok", "broken"))
    record = get_broker().keys("default").task(broken)
    redis_ns.client.delete(record)
    redis_ns.client.set(record, "written by hand")

    page = insp.tasks("default", State.SCHEDULED)

    by_id = {item.id: item for item in page.items}
    assert set(by_id) == {good, broken}
    assert by_id[good].decode_error is None
    assert by_id[broken].state == "scheduled"
    assert by_id[broken].error is not None
    assert f"its record {record!r} is not a hash" in by_id[broken].error
    assert "Deleting the task deletes that key" in by_id[broken].error
    task = insp.task("default", broken)
    assert task is not None
    assert task.error == by_id[broken].error
    assert insp.delete("default", broken) is True
    assert not redis_ns.client.exists(record)
    assert [item.id for item in insp.tasks("default", State.SCHEDULED).items] == [good]


def test_tasks__rejects_unknown_queue_state_and_page(insp: Inspector) -> None:
    with pytest.raises(UnknownQueue, match="critical, default, low"):
        insp.tasks("nope", State.PENDING)
    with pytest.raises(ValueError, match="use one of scheduled, pending, active"):
        insp.tasks("default", "archived")
    with pytest.raises(ValueError, match="page must be 1 or more"):
        insp.tasks("default", State.PENDING, page=0)
    with pytest.raises(ValueError, match="per_page 1 to 1000"):
        insp.tasks("default", State.PENDING, per_page=1001)


# -- task, find -----------------------------------------------------------------------------


def test_task__returns_one_task_or_none(insp: Inspector) -> None:
    task_id = Fails.enqueue(Note("x")).id
    run_burst()

    info = insp.task("default", task_id)

    assert info is not None
    assert (info.state, info.attempts, info.error) == ("dead", 1, "RuntimeError: boom x")
    assert info.traceback is not None
    assert "RuntimeError" in info.traceback
    assert None not in (info.died_at, info.failed_at, info.started_at)
    assert insp.task("default", "missing") is None
    assert insp.task("low", task_id) is None


def test_find__looks_in_every_queue(insp: Inspector) -> None:
    task_id = Noop.enqueue(Note("x"), queue="low").id

    info = insp.find(task_id)

    assert info is not None
    assert (info.id, info.queue) == (task_id, "low")
    assert insp.find("missing") is None


# -- retry ----------------------------------------------------------------------------------


def test_retry__dead_task_resets_attempts_and_runs_again(
    insp: Inspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = Flaky.enqueue(Note("x"), max_attempts=1).id
    run_burst()
    dead = insp.task("default", task_id)
    assert dead is not None
    assert (dead.state, dead.attempts) == ("dead", 1)
    monkeypatch.setattr(Flaky, "failing", False)

    assert insp.retry("default", task_id) is True

    pending = insp.task("default", task_id)
    assert pending is not None
    assert (pending.state, pending.attempts, pending.crashes, pending.died_at) == (
        "pending",
        0,
        0,
        None,
    )
    assert [(o.task_id, o.state) for o in run_burst()] == [(task_id, "completed")]
    assert depths(insp)["dead"] == 0


def test_retry__a_retrying_task_runs_now(insp: Inspector) -> None:
    retrying = Flaky.enqueue(Note("again")).id
    run_burst()  # Flaky fails once: retry, with its next attempt about a second away

    assert insp.retry("default", retrying) is True

    info = insp.task("default", retrying)
    assert info is not None
    assert (info.state, info.attempts, info.next_at) == ("pending", 1, None)
    assert {state: n for state, n in depths(insp).items() if n} == {"pending": 1}
    assert {o.task_id for o in run_burst()} == {retrying}


@pytest.mark.parametrize(
    "state", [State.SCHEDULED, State.PENDING, State.ACTIVE, State.RETRY, State.DEAD, "completed"]
)
def test_may_retry__one_rule_for_the_admin_and_the_api(state: str) -> None:
    # DESIGN.md section 4: a retry or dead task leaves by "retry now"; a scheduled one by the
    # forwarder when it is due.
    assert inspector.may_retry(state) is (state in (State.RETRY, State.DEAD))


def test_retry__a_scheduled_task_is_not_retried(insp: Inspector) -> None:
    scheduled = Noop.enqueue(Note("later"), delay=3600).id

    assert insp.retry("default", scheduled) is False

    info = insp.task("default", scheduled)
    assert info is not None
    assert info.state == State.SCHEDULED


def test_retry__pending_task_returns_false(insp: Inspector) -> None:
    task_id = Noop.enqueue(Note("x")).id

    assert insp.retry("default", task_id) is False
    assert insp.retry("default", "missing") is False

    assert depths(insp)["pending"] == 1


# -- delete ---------------------------------------------------------------------------------


def test_delete__second_enqueue_with_same_key_is_refused_without_it(insp: Inspector) -> None:
    first = Noop.enqueue(Note("x"), idempotency_key="order-1")

    with pytest.raises(DuplicateJob) as caught:
        Noop.enqueue(Note("x"), idempotency_key="order-1")

    assert caught.value.original_id == first.id


def test_delete__releases_the_idempotency_key(insp: Inspector) -> None:
    first = Noop.enqueue(Note("x"), idempotency_key="order-1")

    assert insp.delete("default", first.id) is True

    assert insp.task("default", first.id) is None
    assert depths(insp)["pending"] == 0
    second = Noop.enqueue(Note("x"), idempotency_key="order-1")
    assert second.id != first.id
    assert second.state == "pending"


def test_delete__active_task_raises_task_running(insp: Inspector) -> None:
    task_id = Noop.enqueue(Note("x")).id
    assert get_broker().dequeue(["default"]) is not None

    with pytest.raises(TaskRunning, match=r"is running \(active\) and cannot be deleted") as caught:
        insp.delete("default", task_id)

    assert (caught.value.task_id, caught.value.queue) == (task_id, "default")
    assert isinstance(caught.value, ValueError)  # what callers caught before

    assert depths(insp)["active"] == 1


def test_delete__missing_task_returns_false(insp: Inspector) -> None:
    assert insp.delete("default", "missing") is False


def test_delete__reads_again_when_the_task_moved(
    insp: Inspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a scheduled task that the forwarder moves to pending just before delete's script.
    task_id = Noop.enqueue(Note("x"), delay=3600).id
    broker = get_broker()
    delete = broker.delete
    replies = []

    def racing_delete(queue: str, tid: str, state: str, idem: str | None) -> object:
        if not replies:
            broker.run_now(queue, tid, State.SCHEDULED)
        replies.append(delete(queue, tid, state, idem))
        return replies[-1]

    monkeypatch.setattr(broker, "delete", racing_delete)

    assert insp.delete("default", task_id) is True

    assert replies == [Deleted.MOVED, Deleted.DELETED]
    assert insp.task("default", task_id) is None


# -- pause, resume --------------------------------------------------------------------------


def test_pause__makes_run_burst_skip_the_queue_until_resume(insp: Inspector) -> None:
    paused = Noop.enqueue(Note("x")).id
    other = Noop.enqueue(Note("y"), queue="low").id

    insp.pause("default")

    assert [q.paused for q in insp.queues()] == [False, True, False]
    assert [o.task_id for o in run_burst()] == [other]
    assert depths(insp)["pending"] == 1

    insp.resume("default")

    assert [q.paused for q in insp.queues()] == [False, False, False]
    assert [o.task_id for o in run_burst()] == [paused]


# -- retry_all_dead, delete_all_dead --------------------------------------------------------


def test_retry_all_dead__runs_every_dead_task_in_batches(
    insp: Inspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspector, "BATCH_SIZE", 2)
    Fails.enqueue_many([Note(str(n)) for n in range(5)])
    run_burst()
    assert depths(insp)["dead"] == 5

    assert insp.retry_all_dead("default") == 5

    assert (depths(insp)["dead"], depths(insp)["pending"]) == (0, 5)
    assert insp.retry_all_dead("default") == 0


def test_delete_all_dead__deletes_in_batches_and_releases_keys(
    insp: Inspector, monkeypatch: pytest.MonkeyPatch, redis_ns: RedisNamespace
) -> None:
    monkeypatch.setattr(inspector, "BATCH_SIZE", 2)
    for n in range(5):
        Fails.enqueue(Note(str(n)), idempotency_key=f"k{n}")
    run_burst()
    # An id left in the dead set without its record is cleaned up with the rest.
    redis_ns.client.zadd(get_broker().keys("default").dead, {"orphan": 0})
    assert depths(insp)["dead"] == 6

    assert insp.delete_all_dead("default") == 6

    assert depths(insp)["dead"] == 0
    assert Fails.enqueue(Note("again"), idempotency_key="k0").state == "pending"


# -- workers --------------------------------------------------------------------------------


def test_workers__lists_live_workers_with_their_running_tasks(
    insp: Inspector, redis_ns: RedisNamespace
) -> None:
    # Given a worker running one task (its heartbeat published it) and an idle one ...
    task_id = Noop.enqueue(Note("x")).id
    delivery = get_broker().dequeue(["default"])
    assert delivery is not None
    info: dict[str, str | int | float] = {
        "host": "web-1",
        "pid": 4242,
        "queues": "critical,default",
        "concurrency": 4,
        "started": 1_700_000_000.5,
    }
    Heartbeat(get_broker(), "web-1:4242:aaaaaa", info, lambda: [delivery]).tick()
    idle = Heartbeat(get_broker(), "web-2:7:bbbbbb", {**info, "host": "web-2"}, list)
    idle.tick()
    # ... one whose task finished and was deleted since its beat, so the job is unknown ...
    Heartbeat(
        get_broker(), "web-3:9:cccccc", info, lambda: [dataclasses.replace(delivery, id="gone")]
    ).tick()
    # ... and one that stopped beating: its hash expired, its registry entry is left over.
    redis_ns.client.zadd(keys.workers(redis_ns.namespace), {"web-4:1:dddddd": 1})

    workers = insp.workers()

    assert [w.id for w in workers] == ["web-1:4242:aaaaaa", "web-2:7:bbbbbb", "web-3:9:cccccc"]
    busy, free, stale = workers
    assert (busy.host, busy.pid, busy.queues, busy.concurrency) == (
        "web-1",
        4242,
        ("critical", "default"),
        4,
    )
    assert busy.started_at == datetime.fromtimestamp(1_700_000_000.5, UTC)
    assert busy.last_beat is not None
    assert abs((datetime.now(UTC) - busy.last_beat).total_seconds()) < 60
    assert busy.tasks == (inspector.RunningTask(task_id, "default", Noop.name),)
    assert (free.host, free.tasks) == ("web-2", ())
    assert stale.tasks == (inspector.RunningTask("gone", "default", None),)

    idle.stop()

    assert [w.id for w in insp.workers()] == ["web-1:4242:aaaaaa", "web-3:9:cccccc"]


def test_workers__tolerates_malformed_heartbeats(insp: Inspector, redis_ns: RedisNamespace) -> None:
    ns = redis_ns.namespace
    redis_ns.client.zadd(keys.workers(ns), {"odd": 1})
    redis_ns.client.hset(
        keys.worker(ns, "odd"),
        mapping={"pid": "x", "started": "soon", "tasks": '[1, {"id": "a"}, "b"]'},
    )

    (worker,) = insp.workers()

    assert (worker.host, worker.pid, worker.queues, worker.concurrency) == ("", 0, (), 0)
    assert (worker.started_at, worker.last_beat, worker.tasks) == (None, None, ())


def test_workers__empty_without_workers(insp: Inspector) -> None:
    assert insp.workers() == []


# -- the one task listing -------------------------------------------------------------------


def test_list_tasks__merges_queues_newest_first_with_both_filters(insp: Inspector) -> None:
    # Oldest first: a Noop keyed "a-1" on default, a Flaky on low, a Noop keyed "b-1" on low,
    # a Noop keyed "a-2" on low.
    first = Noop.enqueue(Note("1"), idempotency_key="a-1").id
    Flaky.enqueue(Note("2"), queue="low")
    Noop.enqueue(Note("3"), idempotency_key="b-1", queue="low")
    last = Noop.enqueue(Note("4"), idempotency_key="a-2", queue="low").id

    found = insp.list_tasks(
        State.PENDING, ("default", "low"), job=Noop.name, key_contains="a-", per_page=10
    )

    assert [task.id for task in found.items] == [last, first]
    assert (found.total, found.scanned, found.next_offsets) == (4, 4, None)


def test_list_tasks__stops_at_its_budget_and_goes_on_from_its_offsets(insp: Inspector) -> None:
    ids = [Noop.enqueue(Note(str(n))).id for n in range(5)]
    newest = ids[::-1]

    first = insp.list_tasks(State.PENDING, ("default",), job="other", chunk=2, budget=2)
    rest = insp.list_tasks(State.PENDING, ("default",), offsets=first.next_offsets, chunk=2)

    assert (first.items, first.scanned, first.next_offsets) == ([], 2, {"default": 2})
    assert [task.id for task in rest.items] == newest[2:]
    assert rest.next_offsets is None


def test_queues__the_flows_pair_shows_when_it_holds_a_task(insp: Inspector) -> None:
    """A dead flow event (an unknown flow past its grace, say) must be seen and acted on: the
    flows' queues join the overview and the all-queues listing when they hold anything."""
    assert [q.name for q in insp.queues()] == ["critical", "default", "low"]
    ns = get_broker().settings.flows_namespace
    handle = Fails.enqueue(Note("flow event"), queue=f"{ns}_critical")
    run_burst([f"{ns}_critical"])

    assert [q.name for q in insp.queues()] == ["critical", "default", "low", f"{ns}_critical"]
    assert insp.find(handle.id) is not None
    listing = insp.list_tasks("dead", get_broker().settings.known_queues)
    assert [t.id for t in listing.items] == [handle.id]
    assert insp.retry(f"{ns}_critical", handle.id)
