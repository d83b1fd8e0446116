"""`@task` functions as Django's documentation writes them; django-jobs runs them.

result = count_words.enqueue("to be or not to be")
result.refresh(); result.return_value     # {"words": 6, "distinct": 4} once it ran

with idempotency_key(f"digest:{day}"):
    send_digest.using(priority=10).enqueue(day)   # critical queue; DuplicateJob on a repeat
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from django.tasks import TaskContext, task

from django_jobs.tasks import task as jobs_task


@task
def count_words(text: str) -> dict[str, int]:
    """A task with a return value (kept for JOBS["RETENTION"], read with get_result)."""
    words = text.split()
    return {"words": len(words), "distinct": len(set(words))}


@jobs_task(max_attempts=3, timeout=timedelta(seconds=30), retention=timedelta(hours=1))
def send_digest(day: str) -> str:
    """Our options: 3 runs in all, 30 s each, the result kept an hour (Django 6.1's own @task
    takes them too; django_jobs.tasks.task also on 6.0)."""
    return f"digest for {day} sent"


@task(takes_context=True)
def flaky_export(context: TaskContext, rows: int) -> int:
    """Fails on its first attempt, succeeds on the retry (the backoff waits about 1 s)."""
    if context.attempt == 1:
        raise ConnectionError("the export service did not answer")
    return rows


@task
async def ping(host: str) -> str:
    """An async task: the worker runs it on an event loop, within the task's timeout."""
    await asyncio.sleep(0)
    return f"pong from {host}"
