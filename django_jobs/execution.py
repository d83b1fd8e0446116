"""Run a job's handler: the code shared by the worker, the inline mode and the test helpers.

Below both the client and the worker: it imports message, keys, conf, exceptions, models and
idempotency, never the worker, the client or (but for types) jobs, whose Job.enqueue is the
client's.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections

from django_jobs import coroutines
from django_jobs.idempotency import current_task, run_atomically
from django_jobs.keys import State
from django_jobs.message import JobContext, Message, payload_from_json

if TYPE_CHECKING:
    from django_jobs.jobs import Job

logger = logging.getLogger("django_jobs.execution")


def run_job(job: type[Job[Any]], payload: Any, context: JobContext, *, hygiene: bool) -> bool:
    """Run the job; return False if it is atomic and an earlier run of the task committed (run
    was not called: acknowledge it).

    An atomic job runs in one transaction with its ProcessedTask row (`run_atomically`); any
    other marked as the run of its task (`idempotency.current_task`, set here as `processing()`
    would: no code of idempotency runs for a task that writes no row), so the rows its `once()`
    blocks write name it. With hygiene, as a request runs a view: stale DB connections closed
    first and after, outside the transaction. Never with hygiene inside a caller's transaction
    (inline runs, tests): closing the connection there would end the caller's transaction.
    """
    if hygiene:
        close_old_connections()
    try:
        if job.atomic:
            return run_atomically(job.name, context.job_id, lambda: job(context).run(payload))
        token = current_task.set((job.name, context.job_id))
        try:
            if (running := job(context).run(payload)) is not None:  # async def run
                coroutines.run(running, hygiene=hygiene)
        finally:
            current_task.reset(token)
        return True
    finally:
        if hygiene:
            close_old_connections()


def run_inline(job: type[Job[Any]], message: Message) -> str:
    """Run a job now, in this process (Redis disabled); return "completed" or "dead"."""
    context = JobContext(
        job_id=message.id,
        attempt=1,
        crashes=0,
        queue=message.queue,
        deadline=time.time() + message.timeout,
        idempotency_key=message.idempotency_key,
    )
    try:
        run_job(
            job,
            payload_from_json(message.payload, job.payload_type, message.sensitive),
            context,
            hygiene=False,
        )
    except Exception:
        logger.exception(
            "%s %s failed (run inline: Redis is disabled, no retry)", job.name, message.id
        )
        return State.DEAD
    return State.COMPLETED
