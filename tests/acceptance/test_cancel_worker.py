"""Cancel of a running task in a real `runworker` (issue 21): the handler sees JobCanceled within
a heartbeat, and the task ends canceled (not retried, not dead) whether the handler returns,
lets it propagate, or ignores it (then its child is killed after CANCEL_GRACE); the worker
serves on. Each takes a few seconds (HEARTBEAT_INTERVAL 1 s, CANCEL_GRACE 1 s).
"""

from __future__ import annotations

import django_jobs
from django_jobs import CancelOutcome
from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from testproject.probes.jobs import Cancelable, Sleep, Work
from tests.acceptance.conftest import Worker, done, probe, started
from tests.conftest import RedisNamespace, wait_until


def canceled_tags(ns: RedisNamespace) -> list[str]:
    return [tag.decode() for tag in ns.client.lrange(probe(ns, "canceled"), 0, -1)]


def ends_canceled(worker: Worker, task_id: str) -> str:
    """Wait until the task is canceled; return its error."""

    def state() -> str | None:
        task = get_inspector().task("default", task_id)
        return task.error if task is not None and task.state == State.CANCELED else None

    error = wait_until(state, timeout=20, why=worker.output)
    assert isinstance(error, str)
    return error


def test_runworker__a_running_job_sees_job_canceled_and_ends_canceled(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a worker running a job that checks for JobCanceled and returns (then one that lets
    # it propagate, in the same child: one worker start for both)
    worker.start("--concurrency", "1", CANCEL_GRACE=30)
    pid = None
    for how in ("return", "raise"):
        handle = Cancelable.enqueue(Work(f"{how}-1"))
        pid = pid or started(redis_ns, f"{how}-1")
        assert started(redis_ns, f"{how}-1") == pid  # the same child for both

        # When it is canceled
        assert handle.cancel() is CancelOutcome.REQUESTED

        # Then the handler sees JobCanceled within a heartbeat, and the task ends canceled
        error = ends_canceled(worker, handle.id)
        assert canceled_tags(redis_ns)[-1] == f"{how}-1"
        assert error.startswith("JobCanceled: "), how
        task = get_inspector().task("default", handle.id)
        assert task is not None
        assert (task.attempts, task.crashes) == (0, 0), how  # not a failure: nothing spent
        # (the child logs it after the outcome is written: wait for the line, not just the state)
        line = f"{handle.id} canceled while it ran"
        wait_until(lambda line=line: line in worker.output(), timeout=10, why=worker.output)
        assert django_jobs.cancel(handle.id) is CancelOutcome.FINISHED
    assert canceled_tags(redis_ns) == ["return-1", "raise-1"]
    # ...by the same child, which serves on
    Sleep.enqueue(Work("next"))
    wait_until(lambda: done(redis_ns) == ["next:1:0"], timeout=10, why=worker.output)
    assert started(redis_ns, "next") == pid


def test_runworker__a_job_that_ignores_its_cancel_is_stopped_after_the_grace(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given a worker running a job that catches JobCanceled and carries on
    handle = Cancelable.enqueue(Work("ignore-1"))
    worker.start("--concurrency", "1", CANCEL_GRACE=1)
    pid = started(redis_ns, "ignore-1")

    # When it is canceled
    assert django_jobs.cancel(handle.id) is CancelOutcome.REQUESTED

    # Then its child is killed after CANCEL_GRACE, and the task ends canceled, not retried
    error = ends_canceled(worker, handle.id)
    assert canceled_tags(redis_ns) == ["ignore-1"]
    assert error == (
        f"JobCanceled: child {pid} gone (killed 1s after its cancel) before its canceled run "
        f"stopped"
    )
    assert "did not stop within 1s of its cancel: killing child" in worker.output()
    # ...and a new child takes the slot
    Sleep.enqueue(Work("next"))
    wait_until(lambda: done(redis_ns) == ["next:1:0"], timeout=20, why=worker.output)
    assert started(redis_ns, "next") != pid
    task = get_inspector().task("default", handle.id)
    assert task is not None
    assert (task.state, task.attempts, task.crashes) == (State.CANCELED, 0, 0)
