"""Handlers steer their task: Retry, Fail and SkipRetry, Job.atomic, and once() rows that name
their job. On the real Redis and database, through `run_burst` and the processor."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_jobs import Fail, Job, Retry, SkipRetry, once
from django_jobs.client import get_broker
from django_jobs.inspector import get_inspector
from django_jobs.jobs import MAX_FREE_RETRIES
from django_jobs.mail import SendEmail, SendEmailPayload
from django_jobs.models import ProcessedTask
from django_jobs.testing import run_burst
from django_jobs.worker.processor import Outcome, Processor
from testproject.probes.models import Effect
from tests.conftest import RedisNamespace

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Tag:
    tag: str


#: (job, tag, attempt) of every run, in order.
ran: list[tuple[str, str, int]] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()


class AskAgain(Job[Tag]):
    """Asks to be run again, without a failure, every time."""

    max_attempts = 2

    def run(self, payload: Tag) -> None:
        ran.append(("again", payload.tag, self.context.attempt))
        raise Retry(delay=0, reason="the provider said later")


class Decline(Job[Tag]):
    def run(self, payload: Tag) -> None:
        ran.append(("decline", payload.tag, self.context.attempt))
        raise Fail(f"card of {payload.tag} declined")


class Unfixable(Job[Tag]):
    def run(self, payload: Tag) -> None:
        ran.append(("unfixable", payload.tag, self.context.attempt))
        try:
            int(payload.tag)
        except ValueError as exc:
            raise SkipRetry(f"{payload.tag!r} can never be a number") from exc


class AtomicEffect(Job[Tag]):
    """Writes an Effect row, then fails on its first run: an atomic job keeps nothing of it."""

    atomic = True

    def run(self, payload: Tag) -> None:
        ran.append(("atomic", payload.tag, self.context.attempt))
        Effect.objects.create(key=payload.tag)
        if self.context.attempt == 1 and payload.tag.startswith("fail"):
            raise RuntimeError("after the write")


class OnceEffect(Job[Tag]):
    def run(self, payload: Tag) -> None:
        with once(f"effect:{payload.tag}") as first:
            if first:
                Effect.objects.create(key=payload.tag)


def state(task_id: str, queue: str = "default") -> Any:
    return get_inspector().task(queue, task_id)


# -- Retry, Fail, SkipRetry ---------------------------------------------------------------------


def test_retry__runs_again_without_a_failure_and_is_bounded(redis_ns: RedisNamespace) -> None:
    handle = AskAgain.enqueue(Tag("r"))

    outcomes = run_burst()  # a delay of 0: due again at once, run again in the same burst

    # The first MAX_FREE_RETRIES deliveries spent nothing (attempt 1 each time); the next one
    # spent the first attempt, and the one after it the second and last: dead.
    assert [a for _, _, a in ran] == [1] * (MAX_FREE_RETRIES + 1) + [2]
    assert [o.state for o in outcomes] == ["retry"] * (MAX_FREE_RETRIES + 1) + ["dead"]
    task = state(handle.id)
    assert (task.state, task.attempts) == ("dead", 2)
    assert "Retry: the provider said later" in task.error
    assert "past the 20 free ones: this Retry spends an attempt" in task.error
    # A free Retry counts no failure: the day's failed counter has only the two spent ones.
    failed = redis_ns.client.keys(f"{redis_ns.namespace}:{{default}}:failed:*")
    assert [int(redis_ns.client.get(key) or 0) for key in failed] == [2]


def test_retry__records_no_failure_and_waits_its_delay(redis_ns: RedisNamespace) -> None:
    class Later(Job[Tag]):
        def run(self, payload: Tag) -> None:
            raise Retry(delay=3600)

    handle = Later.enqueue(Tag("later"))

    assert run_burst() == [
        Outcome(handle.id, Later.name, "default", "retry", "Retry: retry in 3600s")
    ]
    task = state(handle.id)
    assert (task.state, task.attempts, task.traceback or "") == ("retry", 0, "")
    assert (task.next_at - task.failed_at).total_seconds() == pytest.approx(3600, abs=0.01)


@pytest.mark.parametrize(
    ("job", "error", "has_traceback"),
    [
        (Decline, "Fail: card of t declined", False),
        (Unfixable, "SkipRetry: 't' can never be a number", True),
    ],
)
def test_fail_and_skip_retry__dead_at_the_first_run_with_the_reason(
    redis_ns: RedisNamespace, job: type[Job[Tag]], error: str, has_traceback: bool
) -> None:
    handle = job.enqueue(Tag("t"))

    assert run_burst() == [Outcome(handle.id, job.name, "default", "dead", error)]

    assert len(ran) == 1
    task = state(handle.id)
    assert (task.state, task.attempts, task.error) == ("dead", 1, error)
    assert bool(task.traceback) == has_traceback
    if has_traceback:
        assert "ValueError: invalid literal for int()" in task.traceback


@pytest.mark.django_db(transaction=True)
def test_send_email__a_template_gone_in_the_worker_dies_at_once(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    # Given a SendEmail enqueued while its template existed
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [TEMPLATES]}]
    handle = SendEmail.enqueue(SendEmailPayload(to="a@example.com", template="mail/plain.txt"))
    # When the worker's code no longer has it (a deploy in between)
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": []}]

    outcomes = run_burst()

    # Then it dies at its first run instead of burning its five attempts
    assert [(o.task_id, o.state) for o in outcomes] == [(handle.id, "dead")]
    task = state(handle.id, handle.queue)
    assert (task.state, task.attempts) == ("dead", 1)
    assert task.error.startswith("SkipRetry: email template 'mail/plain.txt' does not exist")


# -- Job.atomic and once() ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_atomic__a_failed_run_keeps_nothing_and_the_retry_commits_once(
    redis_ns: RedisNamespace,
) -> None:
    handle = AtomicEffect.enqueue(Tag("fail-first"))

    assert [o.state for o in run_burst()] == ["retry"]
    assert Effect.objects.count() == 0
    assert not ProcessedTask.objects.exists()
    assert get_broker().run_now("default", handle.id, "retry")

    assert [o.state for o in run_burst()] == ["completed"]
    assert list(Effect.objects.values_list("key", flat=True)) == ["fail-first"]
    row = ProcessedTask.objects.get()
    assert (row.key, row.job, row.job_id) == (f"task:{handle.id}", AtomicEffect.name, handle.id)


@pytest.mark.django_db(transaction=True)
def test_atomic__a_redelivery_after_the_commit_is_acked_without_running(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an atomic run that committed, but whose worker died before the ack
    handle = AtomicEffect.enqueue(Tag("once"))
    broker = get_broker()
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    assert Processor(broker, hygiene=False).decide(delivery) is not None  # ran, not written
    assert broker.requeue(delivery, crash=True, reason="its worker died")

    # When the task is delivered again
    with caplog.at_level(logging.INFO, logger="django_jobs.worker.processor"):
        outcomes = run_burst()

    # Then it is acknowledged without calling run() again, and logged as such
    assert outcomes == [Outcome(handle.id, AtomicEffect.name, "default", "completed")]
    assert ran == [("atomic", "once", 1)]
    assert Effect.objects.count() == 1
    assert (
        "an earlier run of this atomic task committed; acknowledged without running it again"
        in caplog.text
    )


@pytest.mark.django_db(transaction=True)
def test_once__rows_written_in_a_run_name_its_job_and_task(redis_ns: RedisNamespace) -> None:
    handle = OnceEffect.enqueue(Tag("named"))

    run_burst()

    row = ProcessedTask.objects.get()
    assert (row.key, row.job, row.job_id) == ("effect:named", OnceEffect.name, handle.id)
