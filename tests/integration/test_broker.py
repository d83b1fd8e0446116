"""The Redis broker on the real Redis: each Lua transition is seeded, run once, and the whole
namespace is compared afterwards (DESIGN.md section 4, STYLE.md section 9).

Snapshots name keys without the namespace (`{default}:t:a`), replace times with their distance
from Redis' own clock ("now" for anything during the test, "now+30" for a lease 30 s away) and
parse the `msg` field, so that a whole namespace compares exactly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs import DuplicateJob, Job
from django_jobs.broker.factory import connect
from django_jobs.broker.protocol import Accepted, Deleted, Delivery, EnqueueRequest, Verdict
from django_jobs.broker.redis import COUNTER_TTL, RedisBroker
from django_jobs.client import get_broker
from django_jobs.keys import QueueKeys
from django_jobs.testing import run_burst
from django_jobs.worker.child import Child
from django_jobs.worker.processor import Outcome
from django_jobs.worker.slots import SlotTable
from tests.conftest import RedisNamespace, RedisServer, wait_until
from tests.redis_state import TIME_FIELDS, UNCHANGED, q, redis_now, snapshot, t


def body(task_id: str) -> str:
    """The encoded message of broker-level tests (the broker does not read it)."""
    return json.dumps({"task": task_id})


def request(task_id: str, queue: str = "default", **kwargs: Any) -> EnqueueRequest:
    return EnqueueRequest(id=task_id, queue=queue, encoded=body(task_id), **kwargs)


def held(task_id: str, epoch: str = "1", queue: str = "default") -> Delivery:
    """A delivery as dequeue hands it out: the scripts read its id, queue and epoch."""
    return Delivery(
        id=task_id,
        queue=queue,
        raw=body(task_id).encode(),
        attempts=0,
        crashes=0,
        epoch=epoch,
        enqueued_at=None,
        first_unknown_at=None,
        lease_deadline=0.0,
    )


@dataclass(frozen=True)
class Seed:
    """One task record written straight into Redis, filed under its state.

    `score` and time fields are seconds from now; a field set to None is left out.
    """

    task_id: str
    state: str
    score: float = 0.0
    queue: str = "default"
    fields: tuple[tuple[str, Any], ...] = ()


def task(
    task_id: str, state: str, score: float = 0.0, *, queue: str = "default", **fields: Any
) -> Seed:
    return Seed(task_id, state, score, queue, tuple(fields.items()))


def put(ns: RedisNamespace, seed: Seed) -> None:
    client = ns.client
    now = redis_now(client)
    k = QueueKeys(ns.namespace, seed.queue)
    # As enqueue writes a record: no attempts, crashes or epoch until one counts (absent: 0).
    record: dict[str, Any] = {"msg": body(seed.task_id), "state": seed.state, "enqueued_at": -1.0}
    record.update(seed.fields)
    mapping = {
        name: str(now + value) if name in TIME_FIELDS else str(value)
        for name, value in record.items()
        if value is not None
    }
    client.hset(k.task(seed.task_id), mapping=mapping)
    if seed.state == "pending":
        client.lpush(k.pending, seed.task_id)
    elif seed.state == "active":
        client.lpush(k.active, seed.task_id)
        client.zadd(k.lease, {seed.task_id: now + seed.score})
    else:
        client.zadd(k.state(seed.state), {seed.task_id: now + seed.score})


def rec(task_id: str, state: str, **fields: Any) -> dict[str, Any]:
    """A task record as a snapshot shows it; a field set to None is absent (the counters are
    until something counts them: attempts, crashes and epoch read as 0 then)."""
    record: dict[str, Any] = {"msg": {"task": task_id}, "state": state, "enqueued_at": "now"}
    record.update(fields)
    return {name: value for name, value in record.items() if value is not None}


def check_transition(
    ns: RedisNamespace,
    seeds: list[Seed],
    act: Callable[[RedisBroker], Any],
    returns: Any,
    expected: Any,
) -> None:
    """Seed, run the transition once, and compare its reply and the whole namespace."""
    for seed in seeds:
        put(ns, seed)
    now = redis_now(ns.client)  # an unchanged namespace reads the same however slow the call
    before = snapshot(ns, now)
    assert act(get_broker()) == returns
    if expected is UNCHANGED:
        assert snapshot(ns, now) == before
    else:  # what the call wrote reads against the clock after it ("now", "now+30")
        assert snapshot(ns) == expected


#: A task being run under epoch 1, its lease 30 s away.
ACTIVE_A = task("a", "active", 30, epoch=1, started_at=-1.0)
ACTIVE_A_SNAP = {
    t("a"): ("hash", rec("a", "active", epoch="1", started_at="now")),
    q("active"): ("list", ["a"]),
    q("lease"): ("zset", [("a", "now+30")]),
}
FAILED_COUNTER = ("string", "1", COUNTER_TTL)
#: ACTIVE_A acked under epoch 1, kept for an hour.
COMPLETED_A_SNAP = {
    t("a"): ("hash", rec("a", "completed", epoch="1", started_at="now", completed_at="now")),
    q("completed"): ("zset", [("a", "now+3600")]),
    q("processed:<day>"): ("string", "1", COUNTER_TTL),
}


# -- a job for the Job-level tests --------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    text: str


noted: list[str] = []


class NoteJob(Job[Note]):
    def run(self, payload: Note) -> None:
        noted.append(payload.text)


class OtherNoteJob(Job[Note]):
    def run(self, payload: Note) -> None:
        noted.append(payload.text)


@pytest.fixture(autouse=True)
def _clear_notes() -> None:
    noted.clear()


# -- snapshot helper ----------------------------------------------------------------------------


def test_snapshot__normalises_times_days_and_messages(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("a", "retry", 5, next_at=5, failed_at=-2, attempts=1))
    redis_ns.client.set(f"{redis_ns.namespace}:{{default}}:failed:2030-01-02", 1, ex=60)
    redis_ns.client.set(f"outside-{redis_ns.namespace}", 1, ex=60)

    snap = snapshot(redis_ns)

    redis_ns.client.delete(f"outside-{redis_ns.namespace}")
    assert snap == {
        t("a"): ("hash", rec("a", "retry", attempts="1", next_at="now+5", failed_at="now")),
        q("retry"): ("zset", [("a", "now+5")]),
        q("failed:<day>"): ("string", "1", 60),
    }


# -- enqueue ------------------------------------------------------------------------------------

IDEM = "idem:noop:k1"


@dataclass(frozen=True)
class EnqueueCase:
    #: Each call is one broker.enqueue; a call builds its requests from (keys, Redis now).
    calls: list[Callable[[QueueKeys, float], list[EnqueueRequest]]]
    replies: list[list[Accepted]]
    expected: dict[str, tuple[Any, ...]]


PENDING_A = {
    t("a"): ("hash", rec("a", "pending")),
    q("pending"): ("list", ["a"]),
    q("wake"): ("list", ["1"]),
}

ENQUEUE_CASES = {
    "to_pending": EnqueueCase(
        calls=[lambda k, now: [request("a")]],
        replies=[[Accepted("pending")]],
        expected=PENDING_A,
    ),
    "delay_to_scheduled_with_next_at": EnqueueCase(
        calls=[lambda k, now: [request("a", delay=60.0)]],
        replies=[[Accepted("scheduled")]],
        expected={
            t("a"): ("hash", rec("a", "scheduled", next_at="now+60")),
            q("scheduled"): ("zset", [("a", "now+60")]),
        },
    ),
    "eta_in_the_past_to_pending": EnqueueCase(
        calls=[lambda k, now: [request("a", eta=now - 100)]],
        replies=[[Accepted("pending")]],
        expected=PENDING_A,
    ),
    "eta_in_the_future_wins_over_delay": EnqueueCase(
        calls=[lambda k, now: [request("a", eta=now + 120, delay=5.0)]],
        replies=[[Accepted("scheduled")]],
        expected={
            t("a"): ("hash", rec("a", "scheduled", next_at="now+120")),
            q("scheduled"): ("zset", [("a", "now+120")]),
        },
    ),
    "newest_on_the_left": EnqueueCase(
        calls=[lambda k, now: [request("a")], lambda k, now: [request("b")]],
        replies=[[Accepted("pending")], [Accepted("pending")]],
        expected={
            t("a"): ("hash", rec("a", "pending")),
            t("b"): ("hash", rec("b", "pending")),
            q("pending"): ("list", ["b", "a"]),
            q("wake"): ("list", ["1", "1"]),
        },
    ),
    "batch_in_one_call": EnqueueCase(
        calls=[lambda k, now: [request("a"), request("b", delay=30.0)]],
        replies=[[Accepted("pending"), Accepted("scheduled")]],
        expected={
            t("a"): ("hash", rec("a", "pending")),
            t("b"): ("hash", rec("b", "scheduled", next_at="now+30")),
            q("pending"): ("list", ["a"]),
            q("scheduled"): ("zset", [("b", "now+30")]),
            q("wake"): ("list", ["1"]),
        },
    ),
    "replayed_request_leaves_one_task": EnqueueCase(
        calls=[lambda k, now: [request("a")], lambda k, now: [request("a")]],
        replies=[[Accepted("pending")], [Accepted("pending")]],
        expected=PENDING_A,
    ),
    "replayed_batch_leaves_one_of_each": EnqueueCase(
        calls=[lambda k, now: [request("a"), request("b")]] * 2,
        replies=[[Accepted("pending"), Accepted("pending")]] * 2,
        expected={
            t("a"): ("hash", rec("a", "pending")),
            t("b"): ("hash", rec("b", "pending")),
            q("pending"): ("list", ["b", "a"]),
            q("wake"): ("list", ["1", "1"]),
        },
    ),
    "idempotency_key_refuses_a_second_task": EnqueueCase(
        calls=[
            lambda k, now: [
                request("a", idempotency_key=k.idempotency("noop", "k1"), idempotency_window=600)
            ],
            lambda k, now: [
                request("b", idempotency_key=k.idempotency("noop", "k1"), idempotency_window=600)
            ],
        ],
        replies=[
            [Accepted("pending")],
            [Accepted("", duplicate_of="a", duplicate_queue="default")],
        ],
        expected={**PENDING_A, q(IDEM): ("string", "a", 600)},
    ),
    "idempotent_replay_of_the_same_id": EnqueueCase(
        calls=[
            lambda k, now: [
                request("a", idempotency_key=k.idempotency("noop", "k1"), idempotency_window=600)
            ]
        ]
        * 2,
        replies=[[Accepted("pending")], [Accepted("pending")]],
        expected={**PENDING_A, q(IDEM): ("string", "a", 600)},
    ),
}


@pytest.mark.parametrize("case", ENQUEUE_CASES.values(), ids=ENQUEUE_CASES.keys())
def test_enqueue__transitions(redis_ns: RedisNamespace, case: EnqueueCase) -> None:
    broker = get_broker()
    k = broker.keys("default")
    now = redis_now(redis_ns.client)

    replies = [broker.enqueue(call(k, now)) for call in case.calls]

    assert replies == case.replies
    assert snapshot(redis_ns) == case.expected


def test_enqueue__replay_answers_exists(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    k = broker.keys("default")
    keys = [k.task("a"), k.pending, k.scheduled, k.wake]
    args = ["a", body("a"), "0", "", 1000]

    first = broker.scripts["enqueue"](keys=keys, args=args)
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)
    second = broker.scripts["enqueue"](keys=keys, args=args)

    assert (first, second) == (["ok", "pending"], ["exists", "pending"])
    assert snapshot(redis_ns, now) == before == PENDING_A


def test_enqueue__wake_up_tokens_stay_bounded_with_no_worker(redis_ns: RedisNamespace) -> None:
    # Nobody consumes the tokens while no worker runs: a backlog must not grow the list.
    broker = get_broker()
    broker.enqueue([request(f"r{n}") for n in range(100)])  # one script call per batch
    for n in range(100):
        broker.enqueue([request(f"s{n}")])  # one call each

    assert redis_ns.client.llen(broker.keys("default").wake) == 64
    assert redis_ns.client.llen(broker.keys("default").pending) == 200


def test_enqueue__idempotency_key_lives_under_the_queue_and_expires(
    redis_ns: RedisNamespace,
) -> None:
    client = redis_ns.client
    key = f"{redis_ns.namespace}:{{default}}:idem:{NoteJob.name}:welcome"
    first = NoteJob.enqueue(Note("1"), idempotency_key="welcome", idempotency_window=0.5)
    assert client.get(key) == first.id.encode()
    assert 0 < client.pttl(key) <= 500
    with pytest.raises(DuplicateJob) as refused:
        NoteJob.enqueue(Note("2"), idempotency_key="welcome", idempotency_window=0.5)
    assert refused.value.original_id == first.id
    # The key is scoped to the job type: another job may use the same key.
    other = OtherNoteJob.enqueue(Note("3"), idempotency_key="welcome")

    wait_until(lambda: not client.exists(key), timeout=5)
    again = NoteJob.enqueue(Note("4"), idempotency_key="welcome", idempotency_window=0.5)

    assert again.id not in (first.id, other.id)
    assert again.state == "pending"
    assert client.get(key) == again.id.encode()
    assert client.lrange(get_broker().keys("default").pending, 0, -1) == [
        again.id.encode(),
        other.id.encode(),
        first.id.encode(),
    ]


def test_enqueue__twenty_threads_one_idempotency_key(redis_ns: RedisNamespace) -> None:
    barrier = threading.Barrier(20, timeout=10)

    def attempt(n: int) -> tuple[str, str]:
        barrier.wait()
        try:
            return "accepted", NoteJob.enqueue(Note(str(n)), idempotency_key="once").id
        except DuplicateJob as exc:
            return "duplicate", exc.original_id

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(attempt, range(20)))

    accepted = [task_id for outcome, task_id in results if outcome == "accepted"]
    assert len(accepted) == 1
    assert sorted(results) == sorted(
        [("accepted", accepted[0])] + [("duplicate", accepted[0])] * 19
    )
    snap = snapshot(redis_ns)
    assert snap[q("pending")] == ("list", accepted)
    assert [name for name in snap if ":t:" in name] == [t(accepted[0])]


# -- dequeue ------------------------------------------------------------------------------------


def brief(delivery: Delivery | None) -> tuple[Any, ...] | None:
    if delivery is None:
        return None
    return (delivery.id, delivery.raw, delivery.attempts, delivery.crashes, delivery.epoch)


@pytest.mark.parametrize(
    ("paused", "seeds", "returns", "expected"),
    [
        pytest.param(False, [], None, {}, id="empty"),
        pytest.param(True, [task("a", "pending")], None, UNCHANGED, id="paused_queue_skipped"),
        pytest.param(
            False,
            [task("a", "pending")],
            ("a", body("a").encode(), 0, 0, "1"),
            ACTIVE_A_SNAP,
            id="to_active_with_lease",
        ),
        pytest.param(
            False,
            [task("a", "pending"), task("b", "pending")],
            ("a", body("a").encode(), 0, 0, "1"),
            {**ACTIVE_A_SNAP, t("b"): ("hash", rec("b", "pending")), q("pending"): ("list", ["b"])},
            id="oldest_first",
        ),
        pytest.param(
            False,
            [task("a", "pending", epoch=4, attempts=2, crashes=1)],
            ("a", body("a").encode(), 2, 1, "5"),
            {
                **ACTIVE_A_SNAP,
                t("a"): (
                    "hash",
                    rec("a", "active", epoch="5", attempts="2", crashes="1", started_at="now"),
                ),
            },
            id="epoch_increments",
        ),
        pytest.param(
            False,
            [task("a", "pending", msg=None)],
            ("a", b"", 0, 0, "1"),
            {
                **ACTIVE_A_SNAP,
                t("a"): ("hash", rec("a", "active", epoch="1", started_at="now", msg=None)),
            },
            id="record_without_msg_handed_out_empty",
        ),
    ],
)
def test_dequeue__transitions(
    redis_ns: RedisNamespace, paused: bool, seeds: list[Seed], returns: Any, expected: Any
) -> None:
    if paused:
        redis_ns.client.set(f"{redis_ns.namespace}:{q('paused')}", "1")
    check_transition(redis_ns, seeds, lambda b: brief(b.dequeue(["default"])), returns, expected)


def test_dequeue__delivery_carries_the_lease_from_redis_time(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    broker.enqueue([request("a")])
    enqueued_at = float(redis_ns.client.hget(broker.keys("default").task("a"), "enqueued_at") or 0)
    before = redis_now(redis_ns.client)

    delivery = broker.dequeue(["default"])

    after = redis_now(redis_ns.client)
    assert delivery is not None
    score = redis_ns.client.zscore(broker.keys("default").lease, "a")
    # The reply carries the deadline through Lua's tostring (0.1 ms precision).
    assert delivery.lease_deadline == pytest.approx(score, abs=1e-3)
    assert before + 30 <= delivery.lease_deadline <= after + 30
    assert delivery == Delivery(
        id="a",
        queue="default",
        raw=body("a").encode(),
        attempts=0,
        crashes=0,
        epoch="1",
        enqueued_at=enqueued_at,
        first_unknown_at=None,
        lease_deadline=delivery.lease_deadline,
    )


def test_dequeue__paused_queue_skipped_for_the_next(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("c", "pending", queue="critical"))
    put(redis_ns, task("d", "pending"))
    redis_ns.client.set(f"{redis_ns.namespace}:{q('paused', 'critical')}", "1")

    delivery = get_broker().dequeue(["critical", "default"])

    assert delivery is not None
    assert (delivery.id, delivery.queue) == ("d", "default")
    assert snapshot(redis_ns)[q("pending", "critical")] == ("list", ["c"])


def test_dequeue__strict_priority_over_a_backlog(redis_ns: RedisNamespace) -> None:
    backlog = NoteJob.enqueue_many([Note(str(n)) for n in range(1000)], queue="low")
    urgent = NoteJob.enqueue(Note("urgent"), queue="critical")
    broker = get_broker()

    first = broker.dequeue(broker.settings.queues)
    second = broker.dequeue(broker.settings.queues)

    assert first is not None
    assert second is not None
    assert (first.id, first.queue) == (urgent.id, "critical")
    assert (second.id, second.queue) == (backlog[0].id, "low")
    assert redis_ns.client.llen(broker.keys("low").pending) == 999


def test_dequeue__two_consumers_race_for_one_task(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    consumers = [RedisBroker(connect(redis_ns.url, 5), broker.settings) for _ in range(2)]
    barrier = threading.Barrier(2, timeout=10)

    def take(consumer: RedisBroker) -> Delivery | None:
        barrier.wait()
        return consumer.dequeue(["default"])

    try:
        with ThreadPoolExecutor(2) as pool:
            for n in range(50):
                broker.enqueue([request(f"r{n}")])
                won = [d for d in pool.map(take, consumers) if d is not None]
                assert [(d.id, d.epoch) for d in won] == [(f"r{n}", "1")]
    finally:
        for consumer in consumers:
            consumer.client.close()

    snap = snapshot(redis_ns)
    assert snap[q("active")] == ("list", [f"r{n}" for n in reversed(range(50))])
    assert q("pending") not in snap


# -- ack ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seeds", "act", "returns", "expected"),
    [
        pytest.param(
            [ACTIVE_A],
            lambda b: b.ack(held("a"), 3600),
            True,
            COMPLETED_A_SNAP,
            id="to_completed_for_its_retention",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.ack(held("a"), 0),
            True,
            {q("processed:<day>"): ("string", "1", COUNTER_TTL)},
            id="retention_0_deletes_the_record",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.ack(held("a", epoch="2"), 3600),
            False,
            UNCHANGED,
            id="stale_epoch_changes_nothing",
        ),
        pytest.param(
            [task("a", "completed", 3600, epoch=1, completed_at=-1.0)],
            lambda b: b.ack(held("a"), 3600),
            True,
            UNCHANGED,
            id="replay_answers_acked_and_changes_nothing",
        ),
        pytest.param(
            [task("a", "completed", 3600, epoch=2, completed_at=-1.0)],
            lambda b: b.ack(held("a"), 3600),
            False,
            UNCHANGED,
            id="completed_under_another_epoch_changes_nothing",
        ),
    ],
)
def test_ack__transitions(
    redis_ns: RedisNamespace, seeds: list[Seed], act: Any, returns: Any, expected: Any
) -> None:
    check_transition(redis_ns, seeds, act, returns, expected)


def test_ack__stale_epoch_after_recover_changes_nothing(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    broker.enqueue([request("a")])
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    # The worker froze: its lease ran out and the recoverer handed the task back.
    redis_ns.client.zadd(broker.keys("default").lease, {"a": redis_now(redis_ns.client) - 1})
    assert broker.recover("default") == [("a", "pending")]
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)

    assert broker.ack(delivery, 3600) is False

    assert snapshot(redis_ns, now) == before
    assert before[t("a")] == ("hash", rec("a", "pending", epoch="2", crashes="1", started_at="now"))


def test_ack__replay_after_retention_0_answers_acked(redis_ns: RedisNamespace) -> None:
    # redis-py replays a command whose reply timed out; ack.lua promises 1 for such a replay.
    put(redis_ns, ACTIVE_A)
    broker = get_broker()
    assert broker.ack(held("a"), 0) is True
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)

    replay = broker.ack(held("a"), 0)

    assert snapshot(redis_ns, now) == before
    assert replay is True, "a replayed ack with retention 0 answers 'not yours' (stale)"


# -- settle: a worker child's outcome and next fetch in one round trip -------------------------


def verdict(action: str, task_id: str = "a", epoch: str = "1", **fields: Any) -> Verdict:
    return Verdict(task_id, "default", epoch, "probes.Noop", action, **fields)


PENDING_B = task("b", "pending")
ACTIVE_B_SNAP = {
    t("b"): ("hash", rec("b", "active", epoch="1", started_at="now")),
    q("active"): ("list", ["b"]),
    q("lease"): ("zset", [("b", "now+30")]),
}


@pytest.mark.parametrize(
    ("seeds", "verdicts", "written", "fetched", "expected"),
    [
        pytest.param(
            [ACTIVE_A, PENDING_B],
            [verdict("ack", retention=3600)],
            [True],
            ["b"],
            {**COMPLETED_A_SNAP, **ACTIVE_B_SNAP},
            id="ack_and_fetch_the_next",
        ),
        pytest.param(
            [ACTIVE_A, PENDING_B],
            [verdict("ack", epoch="2", retention=3600)],
            [False],
            ["b"],
            {
                **ACTIVE_A_SNAP,
                **ACTIVE_B_SNAP,
                q("active"): ("list", ["b", "a"]),
                q("lease"): ("zset", [("a", "now+30"), ("b", "now+30")]),
            },
            id="stale_ack_still_fetches",
        ),
        pytest.param(
            [ACTIVE_A],
            [verdict("ack", retention=0)],
            [True],
            [],
            {q("processed:<day>"): ("string", "1", COUNTER_TTL)},
            id="ack_with_nothing_to_fetch",
        ),
        pytest.param(
            [ACTIVE_A, PENDING_B],
            [verdict("kill", error="E: boom", traceback="tb")],
            [True],
            ["b"],
            {
                t("a"): (
                    "hash",
                    rec(
                        "a",
                        "dead",
                        epoch="1",
                        started_at="now",
                        attempts="1",
                        error="E: boom",
                        traceback="tb",
                        failed_at="now",
                        died_at="now",
                    ),
                ),
                q("dead"): ("zset", [("a", "now")]),
                q("failed:<day>"): FAILED_COUNTER,
                **ACTIVE_B_SNAP,
            },
            id="kill_and_fetch_the_next",
        ),
        pytest.param([PENDING_B], [], [], ["b"], {**ACTIVE_B_SNAP}, id="fetch_without_an_outcome"),
    ],
)
def test_settle__writes_the_outcome_and_fetches(
    redis_ns: RedisNamespace,
    seeds: list[Seed],
    verdicts: list[Verdict],
    written: list[bool],
    fetched: list[str],
    expected: Any,
) -> None:
    check_transition(
        redis_ns,
        seeds,
        lambda b: (lambda w, d: (w, [x.id for x in d]))(*b.settle(verdicts, ["default"], 1)),
        (written, fetched),
        expected,
    )


def test_settle__runs_again_after_redis_forgets_its_scripts(
    private_redis: RedisServer, settings: Any
) -> None:
    # A Redis restart (or SCRIPT FLUSH) empties the script cache: the worker's next settle
    # loads the scripts again instead of failing.
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t"}
    broker = get_broker()
    broker.enqueue([request("a"), request("b")])
    first = broker.dequeue(["default"])
    assert first is not None
    private_redis.client().script_flush()

    written, fetched = broker.settle([verdict("ack", retention=60)], ["default"], 1)

    assert (written, [d.id for d in fetched]) == ([True], ["b"])


def test_child_wait__a_task_fetched_as_the_stop_comes_goes_back_untouched(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SIGTERM that lands while an idle child's wait-and-fetch reply is on its way: the fetch
    # may already have taken a task, which the stopping child must not run nor strand.
    broker = get_broker()
    handle = NoteJob.enqueue(Note("x"))
    child = Child(broker, ["default"], SlotTable(1), 0)
    wait_and_fetch = broker.wait_and_fetch

    def then_sigterm(queues: Sequence[str], timeout: float) -> list[Delivery]:
        deliveries = wait_and_fetch(queues, timeout)
        child.stopping = True  # what Child._on_term does
        return deliveries

    monkeypatch.setattr(broker, "wait_and_fetch", then_sigterm)

    assert child._wait() == []

    snap = snapshot(redis_ns)
    record = snap[t(handle.id)][1]
    assert snap[q("pending")] == ("list", [handle.id])
    assert q("active") not in snap
    assert q("lease") not in snap
    assert record["state"] == "pending"
    assert set(record) & {"attempts", "crashes"} == set()  # none counted: both read as 0
    assert noted == []


# -- retry --------------------------------------------------------------------------------------

TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n'


def retried(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "epoch": "1",
        "started_at": "now",
        "attempts": "1",
        "error": "ValueError: boom",
        "traceback": TRACEBACK,
        "failed_at": "now",
        "next_at": "now+5",
    }
    return rec("a", "retry", **{**record, **fields})


@pytest.mark.parametrize(
    ("seeds", "act", "returns", "expected"),
    [
        pytest.param(
            [ACTIVE_A],
            lambda b: b.retry(held("a"), 5, "ValueError: boom", TRACEBACK),
            True,
            {
                t("a"): ("hash", retried()),
                q("retry"): ("zset", [("a", "now+5")]),
                q("failed:<day>"): FAILED_COUNTER,
            },
            id="spends_an_attempt",
        ),
        pytest.param(
            [task("a", "active", 30, epoch=1, started_at=-1.0, attempts=3)],
            lambda b: b.retry(held("a"), 5, "ValueError: boom", TRACEBACK),
            True,
            {
                t("a"): ("hash", retried(attempts="4")),
                q("retry"): ("zset", [("a", "now+5")]),
                q("failed:<day>"): FAILED_COUNTER,
            },
            id="counts_on_from_earlier_attempts",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.retry(held("a"), 5, "ValueError: boom", TRACEBACK, spend=False),
            True,
            {t("a"): ("hash", retried(attempts=None)), q("retry"): ("zset", [("a", "now+5")])},
            id="spend_false_keeps_attempts",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.retry(held("a"), 5, "unknown", "", spend=False, unknown=True),
            True,
            {
                t("a"): (
                    "hash",
                    retried(attempts=None, error="unknown", traceback="", first_unknown_at="now"),
                ),
                q("retry"): ("zset", [("a", "now+5")]),
            },
            id="unknown_job_records_when_first_seen",
        ),
        pytest.param(
            [task("a", "active", 30, epoch=1, started_at=-1.0, first_unknown_at=-100.0)],
            lambda b: b.retry(held("a"), 5, "unknown", "", spend=False, unknown=True),
            True,
            {
                t("a"): (
                    "hash",
                    retried(
                        attempts=None, error="unknown", traceback="", first_unknown_at="now-100"
                    ),
                ),
                q("retry"): ("zset", [("a", "now+5")]),
            },
            id="unknown_job_keeps_the_first_sighting",
        ),
        pytest.param(
            [task("a", "active", 30, epoch=1, started_at=-1.0, first_unknown_at=-100.0)],
            lambda b: b.retry(held("a"), 5, "ValueError: boom", TRACEBACK),
            True,
            {
                t("a"): ("hash", retried()),
                q("retry"): ("zset", [("a", "now+5")]),
                q("failed:<day>"): FAILED_COUNTER,
            },
            id="known_job_forgets_the_unknown_sighting",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.retry(held("a", epoch="0"), 5, "ValueError: boom", TRACEBACK),
            False,
            UNCHANGED,
            id="stale_epoch_changes_nothing",
        ),
        pytest.param(
            [task("a", "retry", 5, epoch=1, attempts=1, error="E", next_at=5.0)],
            lambda b: b.retry(held("a"), 5, "ValueError: boom", TRACEBACK),
            True,
            UNCHANGED,
            id="replay_answers_applied_and_changes_nothing",
        ),
        pytest.param(
            [task("a", "retry", 5, epoch=2, attempts=1, error="E", next_at=5.0)],
            lambda b: b.retry(held("a"), 5, "ValueError: boom", TRACEBACK),
            False,
            UNCHANGED,
            id="retry_under_another_epoch_changes_nothing",
        ),
    ],
)
def test_retry__transitions(
    redis_ns: RedisNamespace, seeds: list[Seed], act: Any, returns: Any, expected: Any
) -> None:
    check_transition(redis_ns, seeds, act, returns, expected)


# -- kill ---------------------------------------------------------------------------------------


def killed(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "epoch": "1",
        "started_at": "now",
        "attempts": "1",
        "error": "ValueError: boom",
        "traceback": TRACEBACK,
        "failed_at": "now",
        "died_at": "now",
    }
    return rec("a", "dead", **{**record, **fields})


@pytest.mark.parametrize(
    ("seeds", "act", "returns", "expected"),
    [
        pytest.param(
            [ACTIVE_A],
            lambda b: b.kill(held("a"), "ValueError: boom", TRACEBACK),
            True,
            {
                t("a"): ("hash", killed()),
                q("dead"): ("zset", [("a", "now")]),
                q("failed:<day>"): FAILED_COUNTER,
            },
            id="to_dead_with_died_at",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.kill(held("a"), "ValueError: boom", TRACEBACK, spend=False),
            True,
            {
                t("a"): ("hash", killed(attempts=None)),
                q("dead"): ("zset", [("a", "now")]),
                q("failed:<day>"): FAILED_COUNTER,
            },
            id="spend_false_keeps_attempts",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.kill(held("a", epoch="2"), "ValueError: boom", TRACEBACK),
            False,
            UNCHANGED,
            id="stale_epoch_changes_nothing",
        ),
        pytest.param(
            [task("a", "dead", -1, epoch=1, attempts=1, error="E", died_at=-1.0)],
            lambda b: b.kill(held("a"), "ValueError: boom", TRACEBACK),
            True,
            UNCHANGED,
            id="replay_answers_applied_and_changes_nothing",
        ),
        pytest.param(
            # Recovered past its crash budget: dead under a newer epoch.
            [task("a", "dead", -1, epoch=2, crashes=3, error="E", died_at=-1.0)],
            lambda b: b.kill(held("a"), "ValueError: boom", TRACEBACK),
            False,
            UNCHANGED,
            id="dead_under_another_epoch_changes_nothing",
        ),
    ],
)
def test_kill__transitions(
    redis_ns: RedisNamespace, seeds: list[Seed], act: Any, returns: Any, expected: Any
) -> None:
    check_transition(redis_ns, seeds, act, returns, expected)


# -- forward ------------------------------------------------------------------------------------


def test_forward__moves_only_due_tasks(redis_ns: RedisNamespace) -> None:
    # An id whose record is gone (evicted) goes on too: the worker that takes it files it dead.
    k = get_broker().keys("default")
    redis_ns.client.zadd(k.scheduled, {"ghost": redis_now(redis_ns.client) - 3})
    check_transition(
        redis_ns,
        [
            task("p", "pending"),
            task("s1", "scheduled", -1, next_at=-1.0),
            task("s2", "scheduled", 60, next_at=60.0),
            task("r1", "retry", -2, next_at=-2.0, attempts=1, error="E"),
            task("r2", "retry", 60, next_at=60.0, attempts=1, error="E"),
        ],
        lambda b: b.forward("default"),
        3,
        {
            t("p"): ("hash", rec("p", "pending")),
            t("s1"): ("hash", rec("s1", "pending")),
            t("s2"): ("hash", rec("s2", "scheduled", next_at="now+60")),
            t("r1"): ("hash", rec("r1", "pending", attempts="1", error="E")),
            t("r2"): ("hash", rec("r2", "retry", attempts="1", error="E", next_at="now+60")),
            q("pending"): ("list", ["r1", "s1", "ghost", "p"]),
            q("scheduled"): ("zset", [("s2", "now+60")]),
            q("retry"): ("zset", [("r2", "now+60")]),
            q("wake"): ("list", ["1"]),
        },
    )


def test_forward__nothing_due_changes_nothing(redis_ns: RedisNamespace) -> None:
    check_transition(
        redis_ns,
        [task("s", "scheduled", 60, next_at=60.0), task("r", "retry", 60, next_at=60.0)],
        lambda b: b.forward("default"),
        0,
        UNCHANGED,
    )


def test_forward__delayed_task_does_not_run_early(redis_ns: RedisNamespace) -> None:
    handle = NoteJob.enqueue(Note("later"), delay=2)
    due = redis_ns.client.zscore(get_broker().keys("default").scheduled, handle.id)
    assert handle.state == "scheduled"
    assert due is not None

    assert run_burst() == []
    assert handle.refresh() == "scheduled"
    assert noted == []

    wait_until(lambda: redis_now(redis_ns.client) >= due, timeout=5)
    assert run_burst() == [Outcome(handle.id, NoteJob.name, "default", "completed")]
    assert noted == ["later"]


# -- extend_lease -------------------------------------------------------------------------------


def test_extend_lease__only_pairs_that_still_match(redis_ns: RedisNamespace) -> None:
    check_transition(
        redis_ns,
        [
            task("a", "active", 5, epoch=1, started_at=-1.0),
            # Recovered and handed to another worker since: epoch 2.
            task("b", "active", 5, epoch=2, started_at=-1.0),
            # Recovered and waiting: no lease.
            task("c", "pending", epoch=2, crashes=1),
        ],
        # x: no record (acked with retention 0 a moment ago): not extended, and not lost.
        lambda b: b.extend_leases("default", [("a", "1"), ("b", "1"), ("c", "1"), ("x", "1")]),
        [("b", "1"), ("c", "1")],
        {
            t("a"): ("hash", rec("a", "active", epoch="1", started_at="now")),
            t("b"): ("hash", rec("b", "active", epoch="2", started_at="now")),
            t("c"): ("hash", rec("c", "pending", epoch="2", crashes="1")),
            q("active"): ("list", ["b", "a"]),
            q("lease"): ("zset", [("b", "now+5"), ("a", "now+30")]),
            q("pending"): ("list", ["c"]),
        },
    )


def test_extend_lease__nothing_held_is_nothing_lost(redis_ns: RedisNamespace) -> None:
    check_transition(redis_ns, [ACTIVE_A], lambda b: b.extend_leases("default", []), [], UNCHANGED)


# -- recover ------------------------------------------------------------------------------------


def test_recover__expired_leases_back_to_pending_or_dead(redis_ns: RedisNamespace) -> None:
    check_transition(
        redis_ns,
        [
            task("p", "pending"),
            task("a", "active", -2, epoch=1, started_at=-3.0, attempts=1),
            task("b", "active", -1, epoch=4, started_at=-3.0, crashes=2),
            task("c", "active", 30, epoch=1, started_at=-1.0),
        ],
        lambda b: b.recover("default"),
        [("a", "pending"), ("b", "dead")],
        {
            t("p"): ("hash", rec("p", "pending")),
            t("a"): (
                "hash",
                rec("a", "pending", epoch="2", crashes="1", attempts="1", started_at="now"),
            ),
            t("b"): (
                "hash",
                rec(
                    "b",
                    "dead",
                    epoch="5",
                    crashes="3",
                    started_at="now",
                    died_at="now",
                    failed_at="now",
                    error="crashed its worker 3 times: its lease expired",
                    traceback="",
                ),
            ),
            t("c"): ("hash", rec("c", "active", epoch="1", started_at="now")),
            # Back at the head of the line (the right end, where dequeue takes from).
            q("pending"): ("list", ["p", "a"]),
            q("active"): ("list", ["c"]),
            q("lease"): ("zset", [("c", "now+30")]),
            q("dead"): ("zset", [("b", "now")]),
            q("wake"): ("list", ["1"]),
        },
    )
    delivery = get_broker().dequeue(["default"])
    assert delivery is not None
    assert (delivery.id, delivery.attempts, delivery.crashes) == ("a", 1, 1)


def test_recover__finds_an_old_id_without_a_lease_behind_many_running(
    redis_ns: RedisNamespace,
) -> None:
    # Active has the newest run at its head: with more running than one call looks at, an
    # old id whose lease is gone (evicted, edited by hand) must still be found, not left in
    # active for ever.
    broker = get_broker()
    broker.enqueue([request(f"t{n}") for n in range(5)])
    fetched = broker.dequeue_many(["default"], 5)
    assert [d.id for d in fetched] == [f"t{n}" for n in range(5)]
    redis_ns.client.zrem(broker.keys("default").lease, "t0")  # the oldest run

    assert broker.recover("default", limit=2) == [("t0", "pending")]


def test_recover__late_outcomes_after_a_real_lease_expiry_change_nothing(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "LEASE": 1, "HEARTBEAT_INTERVAL": 0.2}
    broker = get_broker()
    broker.enqueue([request("a")])
    late = broker.dequeue(["default"])
    assert late is not None
    assert snapshot(redis_ns)[q("lease")] == ("zset", [("a", "now+1")])

    assert wait_until(lambda: broker.recover("default"), timeout=5) == [("a", "pending")]
    now = redis_now(redis_ns.client)  # both read against one clock: the late calls move nothing
    before = snapshot(redis_ns, now)
    assert before == {
        t("a"): ("hash", rec("a", "pending", epoch="2", crashes="1", started_at="now")),
        q("pending"): ("list", ["a"]),
        q("wake"): ("list", ["1", "1"]),
    }

    # The frozen worker wakes up and reports; none of it may land.
    assert broker.ack(late, 3600) is False
    assert broker.retry(late, 1, "E", "") is False
    assert broker.kill(late, "E", "") is False
    assert broker.requeue(late, crash=True) is None
    assert broker.extend_leases("default", [("a", late.epoch)]) == [("a", late.epoch)]
    assert snapshot(redis_ns, now) == before

    again = broker.dequeue(["default"])
    assert again is not None
    assert (again.epoch, again.crashes, again.attempts) == ("3", 1, 0)
    assert broker.ack(again, 0) is True


# -- requeue ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seeds", "act", "returns", "expected"),
    [
        pytest.param(
            [task("p", "pending"), ACTIVE_A],
            lambda b: b.requeue(held("a"), crash=False),
            "pending",
            {
                t("p"): ("hash", rec("p", "pending")),
                t("a"): ("hash", rec("a", "pending", epoch="2", started_at="now")),
                q("pending"): ("list", ["p", "a"]),
                q("wake"): ("list", ["1"]),
            },
            id="clean_hand_back_not_counted",
        ),
        pytest.param(
            [task("p", "pending"), ACTIVE_A],
            lambda b: b.requeue(held("a"), crash=True, reason="child killed"),
            "pending",
            {
                t("p"): ("hash", rec("p", "pending")),
                t("a"): ("hash", rec("a", "pending", epoch="2", crashes="1", started_at="now")),
                q("pending"): ("list", ["p", "a"]),
                q("wake"): ("list", ["1"]),
            },
            id="crash_counted",
        ),
        pytest.param(
            [task("a", "active", 30, epoch=1, started_at=-1.0, crashes=2)],
            lambda b: b.requeue(held("a"), crash=True, reason="child killed by SIGKILL"),
            "dead",
            {
                t("a"): (
                    "hash",
                    rec(
                        "a",
                        "dead",
                        epoch="2",
                        crashes="3",
                        started_at="now",
                        died_at="now",
                        failed_at="now",
                        traceback="",
                        error="crashed its worker 3 times: child killed by SIGKILL",
                    ),
                ),
                q("dead"): ("zset", [("a", "now")]),
            },
            id="crash_past_the_budget_to_dead",
        ),
        pytest.param(
            [ACTIVE_A],
            lambda b: b.requeue(held("a", epoch="0"), crash=True),
            None,
            UNCHANGED,
            id="stale_epoch_changes_nothing",
        ),
    ],
)
def test_requeue__transitions(
    redis_ns: RedisNamespace, seeds: list[Seed], act: Any, returns: Any, expected: Any
) -> None:
    check_transition(redis_ns, seeds, act, returns, expected)


# -- janitor ------------------------------------------------------------------------------------


def test_janitor__purges_completed_and_bounds_dead(redis_ns: RedisNamespace, settings: Any) -> None:
    settings.JOBS = {**settings.JOBS, "DEAD_MAX_TASKS": 2, "DEAD_MAX_AGE": 3600}
    check_transition(
        redis_ns,
        [
            task("c1", "completed", -10, completed_at=-3000.0),
            task("c2", "completed", 100, completed_at=-3000.0),
            task("d1", "dead", -7200),
            task("d2", "dead", -30),
            task("d3", "dead", -20),
            task("d4", "dead", -5),
            task("p", "pending"),
        ],
        lambda b: b.janitor("default"),
        3,
        {
            t("c2"): ("hash", rec("c2", "completed", completed_at="now-3000")),
            t("d3"): ("hash", rec("d3", "dead")),
            t("d4"): ("hash", rec("d4", "dead")),
            t("p"): ("hash", rec("p", "pending")),
            q("completed"): ("zset", [("c2", "now+100")]),
            q("dead"): ("zset", [("d3", "now-20"), ("d4", "now")]),
            q("pending"): ("list", ["p"]),
        },
    )


def test_janitor__keeps_what_is_within_bounds(redis_ns: RedisNamespace) -> None:
    check_transition(
        redis_ns,
        [task("c", "completed", 100), task("d", "dead", -3000)],
        lambda b: b.janitor("default"),
        0,
        UNCHANGED,
    )


# -- run_now ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seeds", "act", "returns", "expected"),
    [
        pytest.param(
            [task("s", "scheduled", 60, next_at=60.0)],
            lambda b: b.run_now("default", "s", "scheduled"),
            True,
            {
                t("s"): ("hash", rec("s", "pending")),
                q("pending"): ("list", ["s"]),
                q("wake"): ("list", ["1"]),
            },
            id="scheduled_to_pending",
        ),
        pytest.param(
            [task("r", "retry", 60, next_at=60.0, attempts=2, error="E", first_unknown_at=-100.0)],
            lambda b: b.run_now("default", "r", "retry"),
            True,
            {
                t("r"): (
                    "hash",
                    rec("r", "pending", attempts="2", error="E", first_unknown_at="now-100"),
                ),
                q("pending"): ("list", ["r"]),
                q("wake"): ("list", ["1"]),
            },
            id="retry_keeps_what_it_spent",
        ),
        pytest.param(
            [
                task(
                    "d",
                    "dead",
                    -100,
                    attempts=5,
                    crashes=1,
                    error="E",
                    died_at=-100.0,
                    failed_at=-100.0,
                    first_unknown_at=-200.0,
                )
            ],
            lambda b: b.run_now("default", "d", "dead"),
            True,
            {
                t("d"): ("hash", rec("d", "pending", error="E", failed_at="now-100")),
                q("pending"): ("list", ["d"]),
                q("wake"): ("list", ["1"]),
            },
            id="dead_gets_a_fresh_budget",
        ),
        pytest.param(
            [task("r", "retry", 60, next_at=60.0)],
            lambda b: b.run_now("default", "r", "dead"),
            False,
            UNCHANGED,
            id="not_in_that_set_changes_nothing",
        ),
    ],
)
def test_run_now__transitions(
    redis_ns: RedisNamespace, seeds: list[Seed], act: Any, returns: Any, expected: Any
) -> None:
    check_transition(redis_ns, seeds, act, returns, expected)


# -- delete -------------------------------------------------------------------------------------


def idem_of(ns: RedisNamespace, holder: str) -> None:
    ns.client.set(f"{ns.namespace}:{q(IDEM)}", holder, ex=600)


def delete(task_id: str, state: str, with_key: bool = False) -> Callable[[RedisBroker], Any]:
    def act(broker: RedisBroker) -> Any:
        key = broker.keys("default").idempotency("noop", "k1") if with_key else None
        return broker.delete("default", task_id, state, key)

    return act


@pytest.mark.parametrize(
    ("holder", "seeds", "act", "returns", "expected"),
    [
        pytest.param(
            None,
            [task("a", "pending"), task("b", "pending")],
            delete("a", "pending"),
            Deleted.DELETED,
            {t("b"): ("hash", rec("b", "pending")), q("pending"): ("list", ["b"])},
            id="pending",
        ),
        pytest.param(
            "a",
            [task("a", "scheduled", 60, next_at=60.0)],
            delete("a", "scheduled", with_key=True),
            Deleted.DELETED,
            {},
            id="releases_its_idempotency_key",
        ),
        pytest.param(
            "other",
            [task("a", "dead", -5)],
            delete("a", "dead", with_key=True),
            Deleted.DELETED,
            {q(IDEM): ("string", "other", 600)},
            id="keeps_a_key_held_by_another_task",
        ),
        pytest.param(
            "a",
            [ACTIVE_A],
            delete("a", "active", with_key=True),
            Deleted.RUNNING,
            UNCHANGED,
            id="active_refused",
        ),
        pytest.param(
            None,
            [task("a", "retry", 5)],
            delete("a", "dead"),
            Deleted.MOVED,
            UNCHANGED,
            id="moved_since_it_was_read",
        ),
        pytest.param(None, [], delete("a", "dead"), Deleted.GONE, {}, id="gone"),
    ],
)
def test_delete__transitions(
    redis_ns: RedisNamespace,
    holder: str | None,
    seeds: list[Seed],
    act: Any,
    returns: Any,
    expected: Any,
) -> None:
    if holder is not None:
        idem_of(redis_ns, holder)
    check_transition(redis_ns, seeds, act, returns, expected)


@pytest.mark.parametrize("state", ["pending", "dead"])
def test_delete__orphan_id_without_a_record_is_removed(
    redis_ns: RedisNamespace, state: str
) -> None:
    k = get_broker().keys("default")
    if state == "pending":
        redis_ns.client.lpush(k.pending, "a")
    else:
        redis_ns.client.zadd(k.dead, {"a": redis_now(redis_ns.client)})
    put(redis_ns, task("b", state))

    check_transition(
        redis_ns,
        [],
        delete("a", state),
        Deleted.DELETED,
        {
            t("b"): ("hash", rec("b", state)),
            q(state): ("list", ["b"]) if state == "pending" else ("zset", [("b", "now")]),
        },
    )


def test_delete__released_key_lets_the_same_work_in_again(redis_ns: RedisNamespace) -> None:
    first = NoteJob.enqueue(Note("1"), idempotency_key="k", delay=60)
    broker = get_broker()
    key = broker.keys("default").idempotency(NoteJob.name, "k")

    assert broker.delete("default", first.id, "scheduled", key) is Deleted.DELETED
    second = NoteJob.enqueue(Note("2"), idempotency_key="k")

    assert second.id != first.id
    assert redis_ns.client.get(key) == second.id.encode()
