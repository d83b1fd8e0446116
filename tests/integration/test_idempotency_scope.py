"""An idempotency key is the job type's on every queue (DESIGN.md section 4), with every script
on one Redis Cluster slot: the key lives in the slot of the job type's home queue, and an
enqueue to another queue hands off through it (broker/handoff.py). The crash windows between
its steps lose nothing and let no duplicate in."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import django
import pytest
from django.db import connection, transaction

from django_jobs import DuplicateJob, Job
from django_jobs.backends import outbox
from django_jobs.broker.handoff import GRACE
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.models import OutboxJob
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace

pytestmark = pytest.mark.django_db(transaction=True)

ran: list[str] = []


@dataclass(frozen=True)
class Order:
    number: int


class ShipOrder(Job[Order]):
    """Home queue: "default" (its default queue)."""

    def run(self, payload: Order) -> None:
        ran.append(f"ship {payload.number}")


class RushOrder(Job[Order]):
    queue = "critical"

    def run(self, payload: Order) -> None:
        ran.append(f"rush {payload.number}")


class AnyQueueOrder(Job[Order]):
    """No default queue: each enqueue names one (as Django's @task functions' DjangoTask)."""

    queue = ""

    def run(self, payload: Order) -> None:
        ran.append(f"any {payload.number}")


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def ids(ns: RedisNamespace, queue: str) -> list[str]:
    return [i.decode() for i in ns.client.lrange(f"{ns.namespace}:{{{queue}}}:pending", 0, -1)]


@pytest.mark.parametrize(
    ("first", "second"),
    [("default", "low"), ("low", "default"), ("low", "critical"), ("low", "low")],
    ids=["home then other", "other then home", "two others", "same other"],
)
def test_scope__the_same_key_on_another_queue_is_refused(
    redis_ns: RedisNamespace, first: str, second: str
) -> None:
    original = ShipOrder.enqueue(Order(1), queue=first, idempotency_key="order-1")

    with pytest.raises(DuplicateJob) as refused:
        ShipOrder.enqueue(Order(1), queue=second, idempotency_key="order-1")

    assert (refused.value.original_id, refused.value.original_queue) == (original.id, first)
    assert f"already accepted as job {original.id} on queue {first}" in str(refused.value)
    assert original.state == "pending"
    assert ids(redis_ns, first) == [original.id]
    assert {q: ids(redis_ns, q) for q in ("critical", "default", "low") if q != first} == {
        q: [] for q in ("critical", "default", "low") if q != first
    }
    # Nothing is left half-done: no hand-off waits for a worker to finish it.
    assert not redis_ns.client.exists(f"{redis_ns.namespace}:{{default}}:handoff")
    # Another job type may use the same key on any queue.
    RushOrder.enqueue(Order(1), queue=second, idempotency_key="order-1")


def test_scope__a_job_type_without_a_default_queue_keeps_its_keys_in_the_first(
    redis_ns: RedisNamespace,
) -> None:
    assert (ShipOrder.idempotency_queue(), AnyQueueOrder.idempotency_queue()) == (
        "default",
        "critical",
    )
    if django.VERSION >= (6, 0):  # Django's tasks framework (django_jobs.tasks): 6.0 and later
        from django_jobs.tasks.run import DjangoTask

        assert DjangoTask.idempotency_queue() == "critical"


def test_scope__one_round_trip_on_the_home_queue_three_elsewhere(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    trips: list[int] = []
    round_trip = broker._round_trip

    def counted(commands: Any, **kwargs: Any) -> Any:
        trips.append(len(commands))
        return round_trip(commands, **kwargs)

    broker._round_trip = counted  # type: ignore[method-assign]
    ShipOrder.enqueue(Order(1), idempotency_key="a")
    home = len(trips)
    ShipOrder.enqueue(Order(2), queue="low", idempotency_key="b")

    assert (home, len(trips) - home) == (1, 3)


def test_scope__a_batch_refuses_the_same_key_on_two_queues(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # The enqueues of one transaction go in one batch at its commit (the bulk path).
    with caplog.at_level(logging.INFO, "django_jobs.client"), transaction.atomic():
        first = ShipOrder.enqueue(Order(1), queue="low", idempotency_key="k", on_commit=True)
        ShipOrder.enqueue(Order(1), queue="critical", idempotency_key="k", on_commit=True)
        ShipOrder.enqueue(Order(1), idempotency_key="k", on_commit=True)
        other = ShipOrder.enqueue(Order(2), queue="critical", idempotency_key="k2", on_commit=True)

    assert (ids(redis_ns, "low"), ids(redis_ns, "critical"), ids(redis_ns, "default")) == (
        [first.id],
        [other.id],
        [],
    )
    assert caplog.text.count(f"already accepted as job {first.id} on queue low") == 2


def test_scope__the_broker_batch_answers_each_request(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    key = broker.keys("default").idempotency(ShipOrder.name, "k")
    requests = [
        EnqueueRequest(f"{n:032x}", queue, "{}", idempotency_key=key, idempotency_window=60)
        for n, queue in enumerate(["low", "critical", "default", "low"])
    ]

    answers = broker.enqueue(requests)

    assert [(a.state, a.duplicate_of, a.duplicate_queue) for a in answers] == [
        ("pending", None, None),
        ("", f"{0:032x}", "low"),
        ("", f"{0:032x}", "low"),
        ("", f"{0:032x}", "low"),
    ]
    assert broker.enqueue(requests[:1])[0].state == "pending"  # a replay: nothing new
    assert ids(redis_ns, "low") == [f"{0:032x}"]


def test_scope__the_outbox_relay_sends_the_key_home(redis_ns: RedisNamespace) -> None:
    first = ShipOrder.enqueue(Order(1), idempotency_key="k")
    with transaction.atomic():
        ShipOrder.enqueue(Order(1), queue="low", idempotency_key="k", outbox=True)
        rows = list(OutboxJob.objects.all())  # before the fast path sends and deletes them

    relayed = outbox.send_rows(rows, connection.alias)  # as a worker's relay would

    assert (relayed.sent, relayed.duplicates) == (0, 1)
    assert (ids(redis_ns, "default"), ids(redis_ns, "low")) == ([first.id], [])


def crash_after_claim(request: EnqueueRequest) -> None:
    """A caller that dies right after step 1: the key is taken, the task only kept."""
    broker = get_broker()
    keys, args = broker._claim_call(request)
    assert broker.scripts["handoff"](keys=keys, args=args) == ["claimed", ""]


def request_for(queue: str, key: str, task_id: str = "a" * 32) -> EnqueueRequest:
    broker = get_broker()
    message = json.dumps({"v": 1, "id": task_id, "job": ShipOrder.name, "queue": queue,
                          "payload": {"number": 7}, "max_attempts": 5, "timeout": 60,
                          "retention": 0, "idempotency_key": key})  # fmt: skip
    return EnqueueRequest(task_id, queue, message,
                          idempotency_key=broker.keys("default").idempotency(ShipOrder.name, key),
                          idempotency_window=600)  # fmt: skip


def test_crash__after_the_claim_the_task_is_finished_by_a_worker_not_lost(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    crash_after_claim(request_for("low", "k"))

    # Meanwhile a duplicate is refused with the id of the task on its way...
    with pytest.raises(DuplicateJob) as refused:
        ShipOrder.enqueue(Order(7), idempotency_key="k")
    assert (refused.value.original_id, refused.value.original_queue) == ("a" * 32, "low")
    assert broker.finish_handoffs("default") == 0  # ...which is not yet past the grace

    assert broker.finish_handoffs("default", grace=0) == 1
    assert broker.finish_handoffs("default", grace=0) == 0

    assert ids(redis_ns, "low") == ["a" * 32]
    run_burst(queues=["low"])
    assert ran == ["ship 7"]
    with pytest.raises(DuplicateJob):
        ShipOrder.enqueue(Order(7), queue="critical", idempotency_key="k")


def test_crash__after_the_task_is_written_finishing_again_enqueues_nothing(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    request = request_for("low", "k")
    crash_after_claim(request)
    local = broker._moved(request.idempotency_key or "", "low")
    # Step 2 ran, then the caller died; the task ran and (retention 0) its record is gone.
    broker.enqueue([EnqueueRequest(request.id, "low", request.encoded, idempotency_key=local,
                                   idempotency_window=600)])  # fmt: skip
    run_burst(queues=["low"])
    assert ran == ["ship 7"]
    assert not redis_ns.client.exists(f"{redis_ns.namespace}:{{low}}:t:{request.id}")

    assert broker.finish_handoffs("default", grace=0) == 1

    assert ids(redis_ns, "low") == []
    run_burst(queues=["low"])
    assert ran == ["ship 7"]
    assert not redis_ns.client.exists(f"{redis_ns.namespace}:{{default}}:handoff")


def test_crash__the_recoverer_finishes_hand_offs_past_the_grace(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_jobs.worker.recoverer import Recoverer

    crash_after_claim(request_for("low", "k"))
    broker = get_broker()
    recoverer = Recoverer(broker, ["critical"])  # serving neither the home nor the task's queue
    recoverer.tick()
    assert ids(redis_ns, "low") == []  # within the grace: its caller may still finish it

    monkeypatch.setattr("django_jobs.broker.handoff.GRACE", 0.0)
    recoverer.tick()

    assert ids(redis_ns, "low") == ["a" * 32]
    assert 3 * broker.settings.enqueue_timeout < GRACE


def test_crash__a_task_its_queue_refuses_gives_its_key_back(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    crash_after_claim(request_for("low", "k"))
    redis_ns.client.set(f"{redis_ns.namespace}:{{low}}:pending", "written by hand")

    assert broker.finish_handoffs("default", grace=0) == 1

    redis_ns.client.delete(f"{redis_ns.namespace}:{{low}}:pending")
    again = ShipOrder.enqueue(Order(8), queue="low", idempotency_key="k")
    assert ids(redis_ns, "low") == [again.id]


def test_delete__releases_the_key_of_a_handed_off_task(redis_ns: RedisNamespace) -> None:
    first = ShipOrder.enqueue(Order(1), queue="low", idempotency_key="k")

    assert get_inspector().delete("low", first.id)

    again = ShipOrder.enqueue(Order(1), idempotency_key="k")
    assert ids(redis_ns, "default") == [again.id]
    with pytest.raises(DuplicateJob) as refused:
        ShipOrder.enqueue(Order(1), queue="low", idempotency_key="k")
    assert refused.value.original_id == again.id


def test_upgrade__a_key_of_the_earlier_release_on_its_queue_still_refuses(
    redis_ns: RedisNamespace,
) -> None:
    # The previous release kept the key in the task's own queue's slot.
    redis_ns.client.set(f"{redis_ns.namespace}:{{low}}:idem:{ShipOrder.name}:k", "b" * 32)

    with pytest.raises(DuplicateJob) as refused:
        ShipOrder.enqueue(Order(1), queue="low", idempotency_key="k")

    assert refused.value.original_id == "b" * 32
    assert ids(redis_ns, "low") == []
    # The home's key was given back: the other queues are not blocked by a task never written.
    ShipOrder.enqueue(Order(1), idempotency_key="k")
