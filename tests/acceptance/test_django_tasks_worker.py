"""Django's tasks framework end to end: `@task` functions enqueued here, run by a real
`manage.py runworker`, their results read back with get_result and refresh().

Runs on the newest Django, on 6.0 (noxfile DJANGO60_WORKER_TESTS) and is skipped on 5.2.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip(
    "django.tasks", reason="Django's tasks framework (django.tasks) needs Django 6.0 or later"
)

from django.tasks import TaskResult, TaskResultStatus
from django.utils import timezone

from tests import django_tasks_funcs as t
from tests.acceptance.conftest import Worker
from tests.conftest import RedisNamespace, wait_until


@pytest.fixture(autouse=True)
def probe_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(t.PROBE, "1")  # the worker inherits it


#: The worker of the running test, whose output a timed-out wait shows.
_current: list[Worker] = []


@pytest.fixture(autouse=True)
def current(worker: Worker) -> Any:
    _current.append(worker)
    yield
    _current.remove(worker)


def finished(result: TaskResult[..., Any], timeout: float = 30) -> TaskResult[..., Any]:
    def done() -> bool:
        result.refresh()
        return result.is_finished

    def why() -> str:
        return f"{result.task.name} {result.id}: {result.status}\n{_current[-1].output()}"

    wait_until(done, timeout=timeout, why=why)
    return result


def signals(ns: RedisNamespace, task_id: str) -> list[tuple[str, str, int]]:
    lines = [line.decode().split() for line in ns.client.lrange(f"{ns.namespace}:probe:signals",
                                                                 0, -1)]  # fmt: skip
    return [(name, status, int(pid)) for name, tid, status, pid in lines if tid == task_id]


def test_tasks__run_on_the_worker_with_results_errors_retries_and_signals(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given tasks of every kind, enqueued before the worker starts
    ok = t.echo.enqueue(1, two={"three": [4]})
    failing = t.fails.enqueue()
    retried = t.fails_once.enqueue()
    context = t.context_of.enqueue()
    coroutine = t.async_echo.enqueue("async")
    hung = t.hang.enqueue()
    crashing = t.crash_once.enqueue()
    later = t.meaning.using(run_after=timezone.now() + timedelta(seconds=2)).enqueue()
    assert later.status == TaskResultStatus.READY

    worker.start("--concurrency", "2")

    # Then each reaches the state Django documents, as get_result and refresh() read it
    finished(ok)
    assert ok.status == TaskResultStatus.SUCCESSFUL, worker.output()
    assert ok.return_value == {"args": [1], "kwargs": {"two": {"three": [4]}}}
    assert ok.enqueued_at <= ok.started_at <= ok.finished_at
    (worker_id,) = ok.worker_ids
    host, pid = worker_id.rsplit(":", 1)
    assert host == socket.gethostname()
    assert int(pid) not in (worker.pid, os.getpid())  # a child of the worker (which may be gone)
    assert t.echo.get_result(ok.id) == ok

    finished(failing)
    assert failing.status == TaskResultStatus.FAILED
    assert failing.errors[0].exception_class is ValueError
    assert failing.errors[0].traceback.endswith("ValueError: This task failed due to ValueError\n")
    with pytest.raises(ValueError, match="Task failed"):
        _ = failing.return_value

    finished(retried)
    assert (retried.status, retried.return_value, retried.attempts) == (
        TaskResultStatus.SUCCESSFUL, 2, 2,
    )  # fmt: skip
    assert [e.exception_class for e in retried.errors] == [ConnectionError]
    assert retried.started_at < retried.last_attempted_at

    finished(context)
    assert context.return_value["id"] == context.id
    assert context.return_value["attempt"] == 1

    assert finished(coroutine).return_value == "async"

    finished(hung)
    assert hung.status == TaskResultStatus.FAILED
    assert hung.errors[0].exception_class_path == "django_jobs.exceptions.JobTimeout"

    # A child killed under its task: the task goes back without spending an attempt
    finished(crashing)
    assert (crashing.status, crashing.return_value, crashing.errors) == (
        TaskResultStatus.SUCCESSFUL, 1, [],
    )  # fmt: skip
    assert len(crashing.worker_ids) == 1

    finished(later)
    assert later.return_value == 42
    assert later.started_at >= later.task.run_after

    # And the signals were sent where Django sends them: enqueued here, the others in the worker
    sent = signals(redis_ns, ok.id)
    assert [(name, status) for name, status, _ in sent] == [
        ("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL"),
    ]  # fmt: skip
    assert sent[0][2] == os.getpid()
    assert sent[1][2] == sent[2][2] == int(pid)
    assert [s[:2] for s in signals(redis_ns, retried.id)] == [
        ("enqueued", "READY"), ("started", "RUNNING"), ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]  # fmt: skip
    assert signals(redis_ns, failing.id)[-1][:2] == ("finished", "FAILED")


def test_tasks__priority_orders_work(worker: Worker, redis_ns: RedisNamespace) -> None:
    # Given low-priority tasks enqueued first, then high-priority ones, and one slot
    low = [t.record.using(priority=-10).enqueue(f"low{i}") for i in range(3)]
    high = [t.record.using(priority=10).enqueue(f"high{i}") for i in range(3)]
    normal = t.record.enqueue("normal")

    worker.start("--concurrency", "1")

    # Then every high one ran before the normal one, and that before every low one
    def ran_at(result: TaskResult[..., Any]) -> float:
        return float(finished(result).return_value.split(":")[1])

    assert max(map(ran_at, high)) < ran_at(normal) < min(map(ran_at, low)), worker.output()
