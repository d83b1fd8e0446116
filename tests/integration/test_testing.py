"""django_jobs.testing: capture enqueues without Redis, assert on them, run them inline."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import redis
from django.core import mail
from django.core.mail import send_mail
from django.db import transaction

from django_jobs import DuplicateJob, Job, PayloadTooLarge
from django_jobs.mail import DeliverEmail
from django_jobs.testing import (
    CapturedJobs,
    assert_enqueued,
    assert_not_enqueued,
    capture_jobs,
    enqueued_jobs,
    run_burst,
)
from testproject.probes.jobs import Noop, Number, Sleep, Work
from tests.conftest import RedisNamespace
from tests.mailing import queue_mail


def test_capture_jobs__keeps_enqueues_without_redis(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None}  # disabled: would run inline without the capture

    with capture_jobs() as jobs:
        handle = Noop.enqueue(Number(1))
        Sleep.enqueue(Work("a", 1.0), queue="low", delay=30)

    assert [(e.job, e.queue) for e in jobs] == [(Noop, "default"), (Sleep, "low")]
    (noop, sleep) = jobs
    assert (noop.id, noop.payload, handle.state) == (handle.id, Number(1), "pending")
    assert (sleep.payload, sleep.delay) == (Work("a", 1.0), 30.0)


def test_capture_jobs__never_talks_to_redis(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": "redis://127.0.0.1:1/0"}  # nothing listens there

    with capture_jobs() as jobs:
        Noop.enqueue(Number(1))

    assert len(jobs) == 1


def test_capture_jobs__runs_the_real_checks() -> None:
    with capture_jobs() as jobs:
        with pytest.raises(PayloadTooLarge):
            Sleep.enqueue(Work("x" * 100_000))
        Noop.enqueue(Number(1), idempotency_key="once")
        with pytest.raises(DuplicateJob) as exc:
            Noop.enqueue(Number(2), idempotency_key="once")

    assert exc.value.original_id == jobs.jobs[0].id
    assert len(jobs) == 1


@pytest.mark.django_db(transaction=True)
def test_capture_jobs__an_on_commit_enqueue_is_captured_only_on_commit() -> None:
    with capture_jobs() as jobs:
        with contextlib.suppress(RuntimeError), transaction.atomic():
            Noop.enqueue(Number(1), on_commit=True)
            raise RuntimeError("rolled back")
        assert len(jobs) == 0
        with transaction.atomic():
            Noop.enqueue(Number(2), on_commit=True)
            assert len(jobs) == 0
        assert [e.payload for e in jobs] == [Number(2)]


def test_assert_enqueued__matches_job_payload_fields_and_queue() -> None:
    with capture_jobs():
        Sleep.enqueue(Work("a", 2.0), queue="critical")
        Sleep.enqueue(Work("b"))

        assert len(assert_enqueued(Sleep)) == 2
        assert_enqueued(Sleep, payload=Work("a", 2.0), queue="critical")
        assert_enqueued(Sleep, payload={"tag": "b"}, count=1)
        assert_not_enqueued(Noop)
        assert_not_enqueued(Sleep, payload={"tag": "c"})
        assert_not_enqueued(Sleep, payload=Work("a", 2.0), queue="low")
        assert [e.payload.tag for e in enqueued_jobs(Sleep)] == ["a", "b"]


def test_assert_enqueued__says_what_was_enqueued_instead() -> None:
    with capture_jobs():
        Sleep.enqueue(Work("b"))
        with pytest.raises(AssertionError, match=r"expected Noop enqueued at least once, found 0; "
                           r"enqueued: Sleep\(Work\(tag='b'"):  # fmt: skip
            assert_enqueued(Noop)
        with pytest.raises(AssertionError, match="expected no Sleep"):
            assert_not_enqueued(Sleep)
        with pytest.raises(AssertionError, match=r"2 time\(s\), found 1"):
            assert_enqueued(Sleep, count=2)


def test_assert_enqueued__outside_a_capture_says_how_to_start_one() -> None:
    with pytest.raises(RuntimeError, match="capture_jobs"):
        assert_enqueued(Noop)


@pytest.mark.django_db(transaction=True)
def test_jobs_captured__fixture_captures_and_runs_inline(
    jobs_captured: CapturedJobs,
    settings: Any,
    mailoutbox: Any,
) -> None:
    queue_mail(settings)
    send_mail("Hi", "Body", None, ["ada@example.com"])

    assert_enqueued(DeliverEmail, queue="critical")
    assert mail.outbox == []
    ran = jobs_captured.run_all()
    assert [e.job for e in ran] == [DeliverEmail]
    assert [m.subject for m in mail.outbox] == ["Hi"]
    assert len(jobs_captured) == 0


class Explode(Job[Number]):
    def run(self, payload: Number) -> None:
        raise ValueError(f"boom {payload.n}")


def test_run_all__an_exception_propagates_and_the_rest_stay() -> None:
    with capture_jobs() as jobs:
        Explode.enqueue(Number(1))
        Noop.enqueue(Number(2))
        with pytest.raises(ValueError, match="boom 1"):
            jobs.run_all()

    assert [e.job for e in jobs] == [Noop]


@pytest.mark.django_db(transaction=True)
def test_run_burst__runs_due_tasks_through_redis(redis_ns: RedisNamespace) -> None:
    Noop.enqueue(Number(1))
    Noop.enqueue(Number(2))

    outcomes = run_burst()

    assert [(o.job, o.state) for o in outcomes] == [("probes.Noop", "completed")] * 2
    assert isinstance(redis_ns.client, redis.Redis)


def test_pytest_plugin__registered_by_its_entry_point(pytestconfig: pytest.Config) -> None:
    # No conftest line and no import: the pytest11 entry point of the distribution loads it.
    assert pytestconfig.pluginmanager.has_plugin("django_jobs.pytest_plugin")


@pytest.mark.django_db(transaction=True)
def test_capture_jobs__on_commit_enqueues_are_captured_at_commit(settings: Any) -> None:
    settings.JOBS = {**settings.JOBS, "ENQUEUE_ON_COMMIT": True}
    with capture_jobs() as jobs:
        with transaction.atomic():
            handle = Noop.enqueue(Number(1))
            assert (len(jobs), handle.state) == (0, "deferred")
        with transaction.atomic():
            Noop.enqueue(Number(2))
            transaction.set_rollback(True)

    assert [e.payload for e in jobs] == [Number(1)]
    assert (jobs.jobs[0].id, handle.state) == (handle.id, "pending")
