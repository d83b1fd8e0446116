"""Module-level `@task` functions for the django_jobs.tasks tests (the worker imports them)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from django.tasks import TaskContext, task


@task
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def meaning() -> int:
    return 42


@task(max_attempts=1)
def fails() -> None:
    raise ValueError("This task failed due to ValueError")


@task(max_attempts=1)
def exits() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task(max_attempts=1)
def complex_return() -> Any:
    return {"when": time}  # a module: JSON cannot hold it


@task(max_attempts=1)
def huge_return() -> str:
    return "x" * 70_000


@task(max_attempts=3, takes_context=True)
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


@task(max_attempts=1, timeout=timedelta(seconds=1))
async def async_hang() -> None:
    await asyncio.sleep(30)


@task(max_attempts=1, timeout=timedelta(seconds=1))
def hang() -> None:
    time.sleep(30)


@task
def record(tag: str) -> str:
    """Returns the time it ran (the priority test orders runs by it)."""
    return f"{tag}:{time.time():.6f}"
