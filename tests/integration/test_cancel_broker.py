"""Cancel's scripts on the real Redis (issue 21): each seeded, run once, and the whole namespace
compared afterwards, as tests/integration/test_broker.py does for the other transitions.

cancel.lua files a waiting task as canceled (pending, scheduled, retry), marks a running one,
and answers a task that had ended without changing it; end_canceled.lua files a canceled run
under its epoch; extend_lease answers the marked runs beside the lost ones; the janitor purges
canceled tasks past their retention.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs import Job
from django_jobs.broker.protocol import Cancellation, CancelOutcome, Renewal
from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerRefused
from django_jobs.keys import State
from tests.conftest import RedisNamespace
from tests.integration.test_broker import (
    ACTIVE_A,
    ACTIVE_A_SNAP,
    check_transition,
    held,
    put,
    rec,
    request,
    task,
)
from tests.integration.test_inspector import Note
from tests.redis_state import UNCHANGED, q, redis_now, snapshot, t

#: The default retention (JOBS["RETENTION"]): the seeds' messages carry none.
DAY = 86400


class KeptBriefly(Job[Note]):
    """A job type that keeps its ended tasks 5 minutes (its class's retention)."""

    retention = 300

    def run(self, payload: Note) -> None:
        pass


def canceled_a(was: str, **fields: Any) -> dict[str, Any]:
    """Task a canceled from state `was` (the cancel's own fields aside: its token)."""
    return {
        t("a"): (
            "hash",
            rec(
                "a",
                "canceled",
                canceled_at="now",
                cancel_requested_at="now",
                canceled_from=was,
                **fields,
            ),
        ),
        q("canceled"): ("zset", [("a", f"now+{DAY}")]),
    }


def without_token(snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with the cancel's request token left out of task a (a random string)."""
    kind, record, *ttl = snap[t("a")]
    assert len(record.pop("cancel_request", "")) == 32
    return {**snap, t("a"): (kind, record, *ttl)}


@pytest.mark.parametrize(
    ("seed", "was"),
    [
        (task("a", "pending"), State.PENDING),
        (task("a", "scheduled", 3600), State.SCHEDULED),
        (task("a", "retry", 60, attempts=1, next_at=60.0), State.RETRY),
    ],
    ids=["pending", "scheduled", "retry"],
)
def test_cancel__a_waiting_task_is_canceled_now(
    redis_ns: RedisNamespace, seed: Any, was: str
) -> None:
    put(redis_ns, seed)
    k = get_broker().keys("default")
    redis_ns.client.set(k.idempotency("noop", "key-1"), "a")

    assert get_broker().cancel("default", "a") == Cancellation(CancelOutcome.CANCELED, was)

    fields = {"attempts": "1"} if was == State.RETRY else {}
    assert without_token(snapshot(redis_ns)) == {
        **canceled_a(was, **fields),
        # The idempotency key stays taken, as after every end of a task (delete releases it).
        q("idem:noop:key-1"): ("string", "a"),
    }


def test_cancel__a_running_task_is_marked_and_keeps_running(redis_ns: RedisNamespace) -> None:
    put(redis_ns, ACTIVE_A)
    broker = get_broker()

    assert broker.cancel("default", "a") == Cancellation(CancelOutcome.REQUESTED, State.ACTIVE)
    # Asked again: the same answer, the first request's time kept.
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    first = snapshot(redis_ns, now)
    assert broker.cancel("default", "a") == Cancellation(CancelOutcome.REQUESTED, State.ACTIVE)

    assert snapshot(redis_ns, now) == first
    record = dict(ACTIVE_A_SNAP[t("a")][1], cancel_requested_at="now")
    assert without_token(first) == {**ACTIVE_A_SNAP, t("a"): ("hash", record)}
    # The heartbeat's renewal answers the marked run, under the epoch it holds, and renews it.
    assert broker.renew_leases("default", [("a", "1")]) == Renewal([], [("a", "1")])
    assert broker.extend_leases("default", [("a", "1")]) == []
    # A stale run of it (epoch 0) is lost, not canceled.
    assert broker.renew_leases("default", [("a", "0")]) == Renewal([("a", "0")], [])


@pytest.mark.parametrize("state", [State.COMPLETED, State.DEAD, State.CANCELED])
def test_cancel__a_task_that_ended_is_left_as_it_is(redis_ns: RedisNamespace, state: str) -> None:
    check_transition(
        redis_ns,
        [task("a", state, 3600)],
        lambda b: b.cancel("default", "a"),
        Cancellation(CancelOutcome.FINISHED, state),
        UNCHANGED,
    )


def test_cancel__an_unknown_id_is_not_found(redis_ns: RedisNamespace) -> None:
    check_transition(
        redis_ns,
        [],
        lambda b: b.cancel("default", "nope"),
        Cancellation(CancelOutcome.NOT_FOUND, ""),
        {},
    )


def test_cancel__a_replay_of_the_same_call_answers_as_the_call_did(
    redis_ns: RedisNamespace,
) -> None:
    # redis-py sends a timed-out command again: the second run must not answer "finished".
    put(redis_ns, task("a", "pending"))
    broker = get_broker()
    keys, args = broker._cancel_keys("default", "a", "token-1")

    first = broker._run("cancel", keys, args)
    now = redis_now(redis_ns.client)  # both read against one clock: a slow replay moves nothing
    after = snapshot(redis_ns, now)

    assert broker._run("cancel", keys, args) == first == ["canceled", "pending"]
    assert snapshot(redis_ns, now) == after
    assert broker._run("cancel", *broker._cancel_keys("default", "a", "token-2")) == [
        "finished",
        "canceled",
    ]


def test_cancel__a_replay_answers_canceled_when_retention_0_deleted_the_record(
    redis_ns: RedisNamespace,
) -> None:
    # redis-py sends a timed-out cancel again: the first run deleted the record (retention 0),
    # and the replay must not report "not found" for the task it did cancel.
    from tests.integration.test_inspector import Noop, Note

    gone = Noop.enqueue(Note("gone"), delay=3600, retention=0)
    broker = get_broker()
    keys, args = broker._cancel_keys("default", gone.id, "token-1")

    first = broker._run("cancel", keys, args)
    assert broker._run("cancel", keys, args) == first == ["canceled", "scheduled"]
    other = broker._cancel_keys("default", gone.id, "token-2")
    assert broker._run("cancel", *other) == ["gone", ""]  # another call: nothing there


def test_cancel__keeps_the_jobs_retention_or_deletes_with_retention_0(
    redis_ns: RedisNamespace,
) -> None:
    from tests.integration.test_inspector import Noop, Note

    kept = Noop.enqueue(Note("kept"), delay=3600, retention=120)
    gone = Noop.enqueue(Note("gone"), delay=3600, retention=0)
    broker = get_broker()

    assert broker.cancel("default", kept.id).outcome is CancelOutcome.CANCELED
    assert broker.cancel("default", gone.id) == Cancellation(
        CancelOutcome.CANCELED, State.SCHEDULED
    )

    snap = snapshot(redis_ns)
    assert snap[q("canceled")] == ("zset", [(kept.id, "now+120")])
    assert t(gone.id) not in snap
    assert q("scheduled") not in snap


def test_cancel__a_key_of_another_type_changes_nothing(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("a", "pending"))
    redis_ns.client.set(f"{redis_ns.namespace}:{{default}}:canceled", "x")
    now = redis_now(redis_ns.client)  # both read against one clock: a slow call moves nothing
    before = snapshot(redis_ns, now)

    with pytest.raises(BrokerRefused, match=r"canceled.* is a string, not the zset"):
        get_broker().cancel("default", "a")

    assert snapshot(redis_ns, now) == before


# -- end_canceled --------------------------------------------------------------------------


def test_end_canceled__files_the_run_as_canceled_under_its_epoch(
    redis_ns: RedisNamespace,
) -> None:
    put(redis_ns, ACTIVE_A)
    broker = get_broker()
    broker.cancel("default", "a")

    # A stale run (another epoch) writes nothing.
    assert broker.end_canceled(held("a", "0"), "JobCanceled: x", "") is False
    assert broker.end_canceled(held("a"), "JobCanceled: x", "tb") is True
    now = redis_now(redis_ns.client)  # both read against one clock: a slow replay moves nothing
    after = snapshot(redis_ns, now)
    assert broker.end_canceled(held("a"), "JobCanceled: x", "tb") is True  # a replay

    assert snapshot(redis_ns, now) == after
    record = dict(
        ACTIVE_A_SNAP[t("a")][1], state="canceled", canceled_at="now",
        cancel_requested_at="now", error="JobCanceled: x", traceback="tb",
    )  # fmt: skip
    assert without_token(after) == {
        t("a"): ("hash", record),
        q("canceled"): ("zset", [("a", f"now+{DAY}")]),
    }


def test_janitor__deletes_canceled_tasks_past_their_retention(redis_ns: RedisNamespace) -> None:
    put(redis_ns, task("old", "canceled", -1))
    put(redis_ns, task("new", "canceled", 3600))

    assert get_broker().janitor("default") == 1

    assert set(snapshot(redis_ns)) == {t("new"), q("canceled")}


def test_run_now__forgets_a_cancel_that_came_too_late(redis_ns: RedisNamespace) -> None:
    # A run asked to cancel as it failed for the last time went dead with the mark; an
    # operator's retry wants the next run, not a cancel of it.
    put(redis_ns, task("a", "dead", cancel_requested_at=-1.0, cancel_request="t"))

    assert get_broker().run_now("default", "a", State.DEAD) is True

    record = snapshot(redis_ns)[t("a")][1]
    assert "cancel_requested_at" not in record
    assert "cancel_request" not in record


# -- a cancel asked of a run that ends another way --------------------------------------------


def _lease_expired(broker: Any, delivery: Any) -> Any:
    k = broker.keys("default")
    broker.client.zadd(k.lease, {delivery.id: 1.0}, xx=True)
    return broker.recover("default")


@pytest.mark.parametrize(
    "end",
    [
        pytest.param(lambda b, d: b.retry(d, 0, "Boom", ""), id="retry"),
        pytest.param(lambda b, d: b.requeue(d, crash=False), id="requeue-on-stop"),
        pytest.param(lambda b, d: b.requeue(d, crash=True, reason="died"), id="child-died"),
        pytest.param(_lease_expired, id="lease-expired"),
    ],
)
def test_cancel__a_run_asked_to_cancel_that_ends_otherwise_is_canceled_not_run_again(
    redis_ns: RedisNamespace, end: Any
) -> None:
    # The run failed, or was handed back, or its worker died, before a heartbeat told it of
    # the cancel: it must not start again from the beginning.
    broker = get_broker()
    broker.enqueue([request("a")])
    (delivery,) = broker.dequeue_many(["default"], 1)
    assert broker.cancel("default", "a").outcome is CancelOutcome.REQUESTED

    end(broker, delivery)

    broker.forward("default")
    assert broker.dequeue_many(["default"], 1) == []
    snap = snapshot(redis_ns)
    assert snap[t("a")][1]["state"] == "canceled"
    assert snap[q("canceled")] == ("zset", [("a", f"now+{DAY}")])
    assert set(snap) - {q("wake")} == {t("a"), q("canceled")}, snap  # the enqueue's token


def test_retry__a_replay_after_the_run_was_canceled_instead_answers_written(
    redis_ns: RedisNamespace,
) -> None:
    # redis-py sends a timed-out retry again: the first filed the run as canceled (it was asked
    # to cancel); the replay must answer as it did, not "no longer yours".
    broker = get_broker()
    broker.enqueue([request("a")])
    (delivery,) = broker.dequeue_many(["default"], 1)
    broker.cancel("default", "a")

    assert broker.retry(delivery, 0, "Boom", "") is True
    now = redis_now(redis_ns.client)  # both read against one clock: a slow replay moves nothing
    after = snapshot(redis_ns, now)
    assert broker.retry(delivery, 0, "Boom", "") is True

    assert snapshot(redis_ns, now) == after


def test_cancel__keeps_the_retention_its_job_type_declares(redis_ns: RedisNamespace) -> None:
    """Per job type retention (issue 21): a class's `retention` is what its canceled task is
    kept for, without an enqueue option; another job type keeps the default."""
    from tests.integration.test_inspector import Noop

    brief = KeptBriefly.enqueue(Note("brief"), delay=3600)
    usual = Noop.enqueue(Note("usual"), delay=3600)

    assert brief.cancel() is CancelOutcome.CANCELED
    assert usual.cancel() is CancelOutcome.CANCELED

    snap = snapshot(redis_ns)
    assert sorted(snap[q("canceled")][1]) == sorted(
        [(brief.id, "now+300"), (usual.id, f"now+{DAY}")]
    )
