"""The job that runs a Django task on our workers: `DjangoTask`, whose payload names the
function and carries its arguments.

One run is one attempt: it records its start (and worker) in Redis, sends `task_started`, calls
the function (a coroutine function on an event loop of its own, within the run's deadline),
and records the return value or the error. The outcome policy then decides as for any job
(retries with the backoff, dead after max_attempts); `task_finished` is sent when the task is
finished: it returned, or this failure is its last.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from inspect import iscoroutinefunction
from typing import Any, ClassVar

from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from django_jobs.broker.factory import get_broker
from django_jobs.broker.redis import RedisBroker
from django_jobs.broker.results import AttemptError, RunRecord, fail, start, succeed
from django_jobs.conf import get_settings
from django_jobs.exceptions import JobTimeout, LeaseLost
from django_jobs.jobs import Fail, Job, Retry, SkipRetry
from django_jobs.tasks.result import build
from django_jobs.tasks.task import TaskPayload, at, task_of
from django_jobs.worker.policy import current_traceback
from django_jobs.worker.processor import running_queue

#: The largest return value kept, in bytes of JSON (OPTIONS["MAX_RETURN_BYTES"] overrides it).
MAX_RETURN_BYTES = 65536


class UnsupportedReturnValue(SkipRetry, TypeError):
    """The function returned a value JSON cannot hold: the task fails (no retry)."""


class ReturnValueTooLarge(SkipRetry, ValueError):
    """The function's return value is larger than the backend keeps: the task fails."""


class TaskFailed(Exception):
    """The function raised a BaseException that is not an Exception (SystemExit): a failure."""


#: The results of tasks run inline (REDIS_URL unset: enqueue runs them at once, in this
#: process), by id, until their enqueue takes them: there is no Redis to keep them in.
inline_results: dict[str, TaskResult[..., Any]] = {}


class DjangoTask(Job[TaskPayload]):
    """Runs one enqueue of a Django `@task` function (see django_jobs.tasks)."""

    name: ClassVar[str] = "django_jobs.DjangoTask"
    #: None of its own: each enqueue names the queue of its task (JobsBackend.queue_for).
    queue: ClassVar[str] = ""

    def run(self, payload: TaskPayload) -> None:
        task = task_of(payload)
        backend = task.get_backend()
        broker = _broker()
        ctx = self.context
        # Its run record goes beside its task's record: on the task's shard (broker/shards.py).
        queue = running_queue.get() or ctx.queue
        started = time.time()
        record = RunRecord(started_at=started, last_attempted_at=started,
                           worker_ids=[ctx.worker_id] * ctx.attempt)  # fmt: skip
        if broker is not None:
            record = start(broker, queue, ctx.job_id, attempt=ctx.attempt,
                           worker_id=ctx.worker_id, now=started,
                           payload=json.dumps(dataclasses.asdict(payload)),
                           retention=payload.retention)  # fmt: skip
        result = build(task, ctx.job_id, payload, None, record, status=TaskResultStatus.RUNNING)
        sender = type(backend)
        task_started.send(sender=sender, task_result=result)
        try:
            value = _returned(_call(task, result, payload, ctx.deadline), backend.options)
        except (KeyboardInterrupt, LeaseLost, Retry):
            raise  # not a failure of the function (LeaseLost: the task is another's now)
        except BaseException as exc:
            final = isinstance(exc, Fail) or ctx.attempt >= payload.max_attempts
            kind = type(exc)
            error = AttemptError(f"{kind.__module__}.{kind.__qualname__}", current_traceback())
            if broker is not None:
                fail(broker, queue, ctx.job_id, attempt=ctx.attempt, error=error,
                     now=time.time(), final=final, retention=payload.retention)  # fmt: skip
            if final:
                failed = dataclasses.replace(
                    result, status=TaskResultStatus.FAILED,
                    errors=[*result.errors, _task_error(error)],
                )  # fmt: skip
                object.__setattr__(failed, "finished_at", at(time.time()))
                if broker is None:
                    inline_results[ctx.job_id] = failed
                task_finished.send(sender=sender, task_result=failed)
            if isinstance(exc, Exception):
                raise
            raise TaskFailed(f"{kind.__name__}: {exc}") from exc
        text = json.dumps(value)
        if broker is not None:
            succeed(broker, queue, ctx.job_id, return_json=text, now=time.time(),
                    retention=payload.retention)  # fmt: skip
        done = dataclasses.replace(result, status=TaskResultStatus.SUCCESSFUL)
        object.__setattr__(done, "_return_value", value)
        object.__setattr__(done, "finished_at", at(time.time()))
        if broker is None:
            inline_results[ctx.job_id] = done
        task_finished.send(sender=sender, task_result=done)


class SensitiveDjangoTask(DjangoTask):
    """Runs one enqueue of a ``@task(sensitive=True)`` function: its arguments are shown
    redacted (`Job.sensitive`)."""

    name: ClassVar[str] = "django_jobs.SensitiveDjangoTask"
    sensitive: ClassVar[bool] = True


#: The names of the jobs that run Django tasks.
DJANGO_TASK_JOBS = (DjangoTask.name, SensitiveDjangoTask.name)


def _task_error(error: AttemptError) -> TaskError:
    return TaskError(exception_class_path=error.exception_class_path, traceback=error.traceback)


def _broker() -> RedisBroker | None:
    """The broker the runs' data goes to; None when jobs run inline (REDIS_URL unset)."""
    return get_broker() if get_settings().enabled else None


def _call(task: Task[..., Any], result: TaskResult[..., Any], payload: TaskPayload,
          deadline: float) -> Any:  # fmt: skip
    args: list[Any] = list(payload.args)
    if task.takes_context:
        args.insert(0, TaskContext(task_result=result))
    if not iscoroutinefunction(task.func):
        return task.func(*args, **payload.kwargs)
    # On an event loop of this thread's own: the worker's alarm (JobTimeout) interrupts it as it
    # interrupts a plain function, and the deadline cancels the coroutine itself.
    limit = max(0.0, deadline - time.time())
    try:
        return asyncio.run(asyncio.wait_for(task.func(*args, **payload.kwargs), limit))
    except TimeoutError:
        if time.time() < deadline:
            raise  # the function's own TimeoutError
        raise JobTimeout(f"timed out after {limit:g} s") from None


def _returned(value: Any, options: dict[str, Any]) -> Any:
    """The return value as JSON, or a failure saying why it cannot be kept."""
    try:
        normal = normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise UnsupportedReturnValue(
            f"the task returned a value JSON cannot hold ({exc}); return JSON values "
            f"(str, int, float, bool, None, lists, dicts) or an id to look the result up by"
        ) from exc
    limit = int(options.get("MAX_RETURN_BYTES", MAX_RETURN_BYTES))
    size = len(json.dumps(normal).encode())
    if size > limit:
        raise ReturnValueTooLarge(
            f"the task returned {size} bytes of JSON, more than the {limit} kept "
            f'(TASKS OPTIONS["MAX_RETURN_BYTES"]): store large results elsewhere (a model, a '
            f"file) and return their id"
        )
    return normal
