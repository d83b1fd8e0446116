"""django_jobs.tasks.JobsBackend without a worker process: enqueue, validation, get_result of
every stored state, runs through `run_burst` (the real broker, in this process).

Django's own tests/tasks is the checklist (see docs/django-tasks.rst): each test here names
the behaviour of a results backend that it checks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pickle
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import django
import pytest

pytest.importorskip(
    "django.tasks", reason="Django's tasks framework (django.tasks) needs Django 6.0 or later"
)

from django.core import checks
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.urls import reverse
from django.utils import timezone

from django_jobs import DuplicateJob
from django_jobs.broker.factory import get_broker
from django_jobs.tasks import JobsBackend, idempotency_key
from django_jobs.testing import run_burst
from tests import django_tasks_funcs as t
from tests.conftest import RedisNamespace

BACKEND = "django_jobs.tasks.JobsBackend"


@pytest.fixture
def backend(redis_ns: RedisNamespace) -> JobsBackend:
    b = task_backends["default"]
    assert isinstance(b, JobsBackend)
    return b


@pytest.fixture
def signals() -> Iterator[list[tuple[str, str, str]]]:
    """(signal, task id, status) for each task signal sent, in order."""
    sent: list[tuple[str, str, str]] = []
    receivers = []
    for name, signal in (("enqueued", task_enqueued), ("started", task_started),
                         ("finished", task_finished)):  # fmt: skip

        def receiver(sender: Any, task_result: Any, name: str = name, **kwargs: Any) -> None:
            sent.append((name, task_result.id, str(task_result.status)))

        signal.connect(receiver, weak=False)
        receivers.append((signal, receiver))
    yield sent
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def test_backend__supports_everything_and_builds_without_redis(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None}
    b = JobsBackend("x", {"BACKEND": BACKEND})
    assert (b.supports_defer, b.supports_priority, b.supports_get_result,
            b.supports_async_task) == (True, True, True, True)  # fmt: skip
    assert b.queues == {"critical", "default", "low"}  # QUEUES defaults to JOBS["QUEUES"]


def test_enqueue__returns_a_ready_result_that_get_result_reads_back(
    backend: JobsBackend, signals: list[tuple[str, str, str]]
) -> None:
    result = t.noop.enqueue(1, two=[3])

    assert (result.status, result.task, result.args, result.kwargs) == (
        TaskResultStatus.READY, t.noop, [1], {"two": [3]},
    )  # fmt: skip
    assert result.enqueued_at is not None
    assert result.started_at is None
    assert (result.errors, result.worker_ids, result.backend) == ([], [], "default")
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert backend.get_result(result.id) == result
    assert t.noop.get_result(result.id) == result
    assert signals == [("enqueued", result.id, "READY")]
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before


def test_aenqueue_and_aget_result(backend: JobsBackend) -> None:
    async def main() -> None:
        result = await t.noop.aenqueue()
        assert result.status == TaskResultStatus.READY
        assert await t.noop.aget_result(result.id) == result
        await result.arefresh()
        assert result.status == TaskResultStatus.READY
        with pytest.raises(TaskResultDoesNotExist):
            await t.noop.aget_result("123")

    asyncio.run(main())


def test_get_result__missing_and_mismatched(backend: JobsBackend) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("123")
    result = t.noop.enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        t.meaning.get_result(result.id)


def test_enqueue__refuses_arguments_json_cannot_hold_naming_them(backend: JobsBackend) -> None:
    with pytest.raises(TypeError, match=r"argument #0 .*Unsupported type"):
        t.noop.enqueue(datetime.now())
    with pytest.raises(TypeError, match=r"argument when= .*Unsupported type"):
        t.noop.enqueue(when=object())
    with pytest.raises(TypeError, match=r"argument #1 .*str keys"):
        t.noop.enqueue(1, {1: "a"})
    assert get_broker().queue_infos(["default"])[0].pending == 0


def test_validate_task__django_rules_and_ours(backend: JobsBackend, settings: Any) -> None:
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        t.noop.using(run_after=datetime.now())
    with pytest.raises(InvalidTask, match="priority must be a whole number"):
        t.noop.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid for backend"):
        t.noop.using(queue_name="nope")
    assert t.noop.using(queue_name="low").queue_name == "low"


def test_validate_task__a_queue_outside_jobs_queues(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "elsewhere"]}}
    with pytest.raises(InvalidTask, match="'elsewhere', which is not one of JOBS"):
        t.noop.using(queue_name="elsewhere")
    (error,) = task_backends["default"].check()
    assert error.id == "django_jobs.E030"
    assert "elsewhere" in error.msg


def test_check__priorities_mapping(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"PRIORITIES": [(0, "x")]}}}
    (error,) = task_backends["default"].check()
    assert error.id == "django_jobs.E031"
    assert "not configured: x" in error.msg
    assert isinstance(error, checks.Error)
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    assert task_backends["default"].check() == []


def test_priority__maps_onto_the_queues(backend: JobsBackend) -> None:
    queues = {p: backend.queue_for(t.noop.using(priority=p)) for p in (100, 1, 0, -1, -100)}
    assert queues == {100: "critical", 1: "critical", 0: "default", -1: "low", -100: "low"}
    assert backend.queue_for(t.noop.using(priority=50, queue_name="low")) == "low"
    t.noop.using(priority=5).enqueue()
    t.noop.using(priority=-5).enqueue()
    infos = {q.name: q.pending for q in get_broker().queue_infos(["critical", "default", "low"])}
    assert infos == {"critical": 1, "default": 0, "low": 1}


def test_priority__configurable(redis_ns: RedisNamespace, settings: Any) -> None:
    priorities = [(10, "critical"), (-100, "low")]
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"PRIORITIES": priorities}}}
    b = task_backends["default"]
    assert isinstance(b, JobsBackend)
    assert [b.queue_for(t.noop.using(priority=p)) for p in (10, 9, 0)] == ["critical", "low", "low"]


def test_run_after__is_a_delayed_enqueue(backend: JobsBackend) -> None:
    later = timezone.now() + timedelta(hours=1)
    result = t.noop.using(run_after=later).enqueue()
    assert get_broker().task_state("default", result.id) == "scheduled"
    fetched = backend.get_result(result.id)
    assert (fetched.status, fetched.task.run_after) == (TaskResultStatus.READY, later)
    assert run_burst() == []  # not due


def test_run__successful_with_return_value_times_and_worker(
    backend: JobsBackend, signals: list[tuple[str, str, str]]
) -> None:
    result = t.echo.enqueue(1, b=[2])
    (outcome,) = run_burst()
    assert outcome.state == "completed"

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == {"args": [1], "kwargs": {"b": [2]}}
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1
    assert len(result.worker_ids) == 1
    assert result.worker_ids[0]
    assert result.errors == []
    assert [s[0] for s in signals] == ["enqueued", "started", "finished"]
    assert signals[1:] == [("started", result.id, "RUNNING"), ("finished", result.id, "SUCCESSFUL")]
    if django.VERSION >= (6, 1):  # a Task pickles from 6.1 on
        assert pickle.loads(pickle.dumps(result)) == result


def test_run__failure_keeps_class_path_and_traceback(
    backend: JobsBackend, signals: list[tuple[str, str, str]]
) -> None:
    cases = [(t.fails, ValueError), (t.exits, SystemExit)]
    for func, kind in cases:
        message = f"This task failed due to {kind.__name__}"
        result = func.enqueue()
        (outcome,) = run_burst()
        assert outcome.state == "dead"
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert result.is_finished
        with pytest.raises(ValueError, match="Task failed"):
            _ = result.return_value
        (error,) = result.errors
        assert error.exception_class is kind
        assert error.traceback.endswith(f"{kind.__name__}: {message}\n")
        assert result.started_at <= result.finished_at
        assert signals[-1] == ("finished", result.id, "FAILED")


def test_run__retries_with_one_error_and_worker_per_attempt(backend: JobsBackend) -> None:
    result = t.fails_twice.enqueue()
    (first,) = run_burst()
    assert first.state == "retry"
    result.refresh()
    assert (result.status, len(result.errors), result.attempts) == (TaskResultStatus.READY, 1, 1)
    broker = get_broker()
    for _ in range(2):
        assert broker.run_now("default", result.id, "retry")  # skip the backoff
        run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert [e.exception_class for e in result.errors] == [ConnectionError, ConnectionError]
    assert "attempt 2 failed" in result.errors[1].traceback
    assert result.attempts == 3
    assert result.started_at < result.last_attempted_at


def test_run__takes_context_with_id_and_attempt(backend: JobsBackend) -> None:
    result = t.context_of.enqueue()
    run_burst()
    result.refresh()
    assert result.return_value["id"] == result.id
    assert result.return_value["attempt"] == 1
    assert len(result.return_value["workers"]) == 1


def test_run__async_task(backend: JobsBackend) -> None:
    result = t.async_echo.enqueue({"a": [1]})
    run_burst()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, {"a": [1]})


def test_run__async_task_past_its_timeout_fails_with_jobtimeout(backend: JobsBackend) -> None:
    result = t.async_hang.enqueue()
    (outcome,) = run_burst()
    assert outcome.state == "dead"
    assert "JobTimeout" in outcome.error
    result.refresh()
    assert result.errors[0].exception_class_path == "django_jobs.exceptions.JobTimeout"


def test_run__return_values_json_cannot_hold_or_too_large_fail(backend: JobsBackend) -> None:
    odd, huge = t.complex_return.enqueue(), t.huge_return.enqueue()
    run_burst()
    odd.refresh()
    huge.refresh()
    assert odd.status == huge.status == TaskResultStatus.FAILED
    assert issubclass(odd.errors[0].exception_class, TypeError)
    assert "Unsupported type" in odd.errors[0].traceback
    assert issubclass(huge.errors[0].exception_class, ValueError)
    assert "more than the 65536 kept" in huge.errors[0].traceback


def test_idempotency_key__refuses_a_second_enqueue_in_the_window(backend: JobsBackend) -> None:
    with idempotency_key("report:1"):
        first = t.noop.enqueue()
        with pytest.raises(DuplicateJob) as caught:
            t.noop.enqueue()
        t.meaning.enqueue()  # another function: another scope
    assert caught.value.original_id == first.id
    t.noop.enqueue()  # outside the block: no key


def test_get_result__kept_for_the_retention_even_after_the_task_record(
    backend: JobsBackend,
) -> None:
    result = t.meaning.enqueue()
    run_burst()
    broker = get_broker()
    ttl = broker.client.ttl(f"{broker.keys('default').prefix}:dt:{result.id}")
    assert 86000 < ttl <= 86400  # JOBS["RETENTION"] after the last write
    broker.client.delete(broker.keys("default").task(result.id))  # as the janitor does
    again = t.meaning.get_result(result.id)
    assert (again.status, again.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert again.enqueued_at == result.enqueued_at


@pytest.mark.django_db
def test_admin__shows_the_function_path_of_a_django_task(backend: JobsBackend) -> None:
    from tests.integration.test_admin import login, make_user, text

    staff = login(make_user("operator", "view_task"))
    result = t.meaning.enqueue()
    page = text(staff.get(reverse("admin:django_jobs_task_change", args=["default", result.id])))
    assert "Job: tests.django_tasks_funcs.meaning (@task)" in page
    listing = text(staff.get(reverse("admin:django_jobs_task_changelist") + "?state=pending"))
    assert "tests.django_tasks_funcs.meaning (@task)" in listing


def test_no_redis__runs_inline_as_django_immediate_backend_does(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": None}  # WHEN_DISABLED "inline"
    ok = t.echo.enqueue("a")
    assert (ok.status, ok.return_value, ok.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        {"args": ["a"], "kwargs": {}},
        1,
    )
    assert ok.enqueued_at <= ok.started_at <= ok.finished_at
    failed = t.fails.enqueue()
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is ValueError
    with pytest.raises(TaskResultDoesNotExist):
        t.echo.get_result(ok.id)  # nothing keeps results without Redis


def test_enqueue__logs_as_django_does(
    backend: JobsBackend, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = t.noop.enqueue()
        run_burst()
    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert len(lines) == 3
    assert "enqueued" in lines[0]
    assert "state=RUNNING" in lines[1]
    assert "state=SUCCESSFUL" in lines[2]
    assert all(result.id in line for line in lines)


@pytest.mark.django_db(transaction=True)
def test_enqueue__does_not_wait_for_the_transaction(backend: JobsBackend, settings: Any) -> None:
    settings.JOBS = {**settings.JOBS, "ENQUEUE_ON_COMMIT": True}
    with transaction.atomic():
        result = t.noop.enqueue()
        assert get_broker().task_state("default", result.id) == "pending"


def test_enqueue__validates_the_task_against_the_backend_of_now(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    low = t.noop.using(queue_name="low")
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}
    with pytest.raises(InvalidTask, match="Queue 'low' is not valid for backend"):
        low.enqueue()


def test_get_result__a_task_killed_from_outside_its_run_is_failed_with_the_reason(
    backend: JobsBackend,
) -> None:
    # A run killed past its timeout's grace writes nothing itself: the supervisor kills the task
    result = t.meaning.enqueue()
    broker = get_broker()
    delivery = broker.dequeue(["default"])
    assert delivery is not None
    reason = "JobTimeout: timed out after 1 s (killed after the grace period)"
    assert broker.kill(delivery, reason, "")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    (error,) = result.errors
    assert error.exception_class_path == "django_jobs.exceptions.JobTimeout"
    assert error.traceback == reason


@pytest.mark.skipif(django.VERSION < (6, 1), reason="a Task pickles from Django 6.1 on")
def test_task__with_our_options_pickles_and_keeps_them() -> None:
    again = pickle.loads(pickle.dumps(t.fails_twice))
    assert again == t.fails_twice
    assert again.max_attempts == 3


@pytest.mark.django_db(transaction=True)
def test_enqueue__with_the_outbox_on_is_sent_when_the_transaction_commits(
    backend: JobsBackend, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    with transaction.atomic():
        result = t.meaning.enqueue()
        assert result.status == TaskResultStatus.READY
        assert get_broker().task_state("default", result.id) is None
    assert get_broker().task_state("default", result.id) == "pending"
    run_burst()
    result.refresh()
    assert result.return_value == 42


def test_validate_task__our_options(backend: JobsBackend) -> None:
    from django_jobs.tasks import task

    with pytest.raises(InvalidTask, match="max_attempts must be 1 or more"):
        task(max_attempts=0)(t.noop.func)
    with pytest.raises(InvalidTask, match="timeout must be a positive duration"):
        task(timeout=timedelta(0))(t.noop.func)
    assert task(timeout=0.5)(t.noop.func).timeout == 0.5
    with pytest.raises(InvalidTask, match="retention must be 0 or more"):
        task(retention=-1)(t.noop.func)
    with pytest.raises(TypeError, match="run_after cannot be set on @task"):
        task(run_after=timezone.now())(t.noop.func)
    assert task(retention=0)(t.noop.func).retention == 0  # 0: keep nothing


@pytest.mark.django_db
def test_check__an_invalid_jobs_setting_is_reported_not_raised(settings: Any) -> None:
    """A misspelt JOBS key with TASKS configured: `manage.py check` prints our settings error
    (the backend neither reads the settings when built nor raises from its own check)."""
    settings.JOBS = {**settings.JOBS, "QUEUS": ["default"]}
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    assert task_backends["default"].check() == []
    found = checks.run_checks()
    assert any(e.id == "django_jobs.E002" and "'QUEUS'" in e.msg for e in found), found
