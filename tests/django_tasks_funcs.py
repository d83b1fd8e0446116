"""Module-level `@task` functions for the django_jobs.tasks tests (the worker imports them).

Django's own `@task` throughout; with our options, Django's on 6.1 and later (it passes them to
the backend's task_class) and ours (`django_jobs.tasks.task`) on 6.0, whose decorator does not.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from typing import Any

import django
import redis
from django.conf import settings
from django.tasks import TaskContext, task
from django.tasks.signals import task_enqueued, task_finished, task_started

if django.VERSION >= (6, 1):
    from django.tasks import task as with_options
else:
    from django_jobs.tasks import task as with_options


@task
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def meaning() -> int:
    return 42


@with_options(max_attempts=1)
def fails() -> None:
    raise ValueError("This task failed due to ValueError")


@with_options(max_attempts=1)
def exits() -> None:
    raise SystemExit("This task failed due to SystemExit")


@with_options(max_attempts=1)
def complex_return() -> Any:
    return {"when": time}  # a module: JSON cannot hold it


@with_options(max_attempts=1)
def huge_return() -> str:
    return "x" * 70_000


@with_options(max_attempts=3, takes_context=True)
def fails_twice(context: TaskContext) -> int:
    if context.attempt < 3:
        raise ConnectionError(f"attempt {context.attempt} failed")
    return context.attempt


@task(takes_context=True)
def context_of(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt,
            "workers": context.task_result.worker_ids}  # fmt: skip


@task
async def async_echo(value: Any) -> Any:
    await asyncio.sleep(0)
    return value


@with_options(max_attempts=1, timeout=timedelta(seconds=1))
async def async_hang() -> None:
    await asyncio.sleep(30)


@with_options(max_attempts=1, timeout=timedelta(seconds=1))
def hang() -> None:
    time.sleep(30)


@task
def record(tag: str) -> str:
    """Returns the time it ran (the priority test orders runs by it)."""
    return f"{tag}:{time.time():.6f}"


@with_options(max_attempts=2, takes_context=True)
def fails_once(context: TaskContext) -> int:
    if context.attempt == 1:
        raise ConnectionError("attempt 1 failed")
    return context.attempt


#: With this variable set (the worker tests set it), every task signal this process receives is
#: pushed to the Redis list `<namespace>:probe:signals` as "signal id status pid".
PROBE = "DJANGO_TASKS_PROBE"


def _probe(name: str) -> Any:
    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        if not os.environ.get(PROBE):
            return
        jobs = settings.JOBS
        client = redis.Redis.from_url(jobs["REDIS_URL"])
        line = f"{name} {task_result.id} {task_result.status} {os.getpid()}"
        client.rpush(f"{jobs['NAMESPACE']}:probe:signals", line)
        client.close()

    return receiver


for _name, _signal in (("enqueued", task_enqueued), ("started", task_started),
                       ("finished", task_finished)):  # fmt: skip
    _signal.connect(_probe(_name), weak=False, dispatch_uid=f"tests-probe-{_name}")


@task(takes_context=True)
def crash_once(context: TaskContext) -> int:
    """Kills its own worker child on its first run (SIGKILL: no exception, no outcome)."""
    jobs = settings.JOBS
    client = redis.Redis.from_url(jobs["REDIS_URL"])
    if client.set(f"{jobs['NAMESPACE']}:probe:crashed:{context.task_result.id}", 1, nx=True):
        os.kill(os.getpid(), signal.SIGKILL)
    return context.attempt
