"""Effects that happen once: `once(key)`, atomic runs, and pruning the processed-tasks table.

At-least-once delivery means a handler can run twice. What makes its database effect happen once
is a row in `ProcessedTask`, written in the same transaction as the effect: the row exists if and
only if the effect committed, and the unique `key` keeps a second run from writing it again.

- `once(key)` wraps a block: the first run to commit the key runs it, every later one skips it.
- `run_atomically(job, job_id, fn)` runs a whole handler that way, keyed by its task id (what
  `Job.atomic = True` is for).
- `prune_batch()` deletes one bounded batch of rows past ``JOBS["PROCESSED_RETENTION"]``; the
  worker's janitor and ``manage.py prune_processed`` call it.

Isolation: the unique index does the work, so READ COMMITTED (PostgreSQL's default) is enough.
On PostgreSQL a second transaction inserting a key the first has inserted but not committed waits
for the first: it then fails (the key is taken) or succeeds (the first rolled back). On SQLite
there is one writer at a time: the second writer waits for the first (up to the connection's
timeout) and then sees the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, router, transaction
from django.utils import timezone

from django_jobs.conf import get_settings
from django_jobs.models import ProcessedTask

#: Rows deleted by one pruning batch (one short transaction each).
PRUNE_BATCH = 5000
#: The longest key `once` accepts (the column's size).
MAX_KEY = ProcessedTask._meta.get_field("key").max_length or 255

#: The job name and task id of the handler running in this context, if any, so that the rows
#: `once` writes say who wrote them. Set around every run: by `execution.run_job` itself (no
#: code of this module runs for a task that writes no row), by `processing()` otherwise.
current_task: ContextVar[tuple[str, str] | None] = ContextVar("django_jobs_task", default=None)


class processing:  # lower case: used as the function it was, `with processing(job, id):`
    """Mark the code inside as the run of task `job_id` of `job` (recorded by `once`). A class,
    not a generator: the worker enters one around every run."""

    __slots__ = ("_token", "_value")

    def __init__(self, job: str, job_id: str) -> None:
        self._value = (job, job_id)

    def __enter__(self) -> None:
        self._token = current_task.set(self._value)

    def __exit__(self, *exc: object) -> None:
        current_task.reset(self._token)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"once() needs a non-empty str key, got {key!r}")
    if len(key) > MAX_KEY:
        raise ValueError(
            f"once() key is {len(key)} characters, over the limit of {MAX_KEY}: "
            f"use a shorter key (a hash of the long one, for example)"
        )


def claim(key: str, *, using: str | None = None) -> bool:
    """Insert the key in the current transaction; False if it is already there.

    The insert runs in a savepoint, so a duplicate key does not break the caller's transaction.
    Must be called inside `transaction.atomic(using=using)`.
    """
    _check_key(key)
    job, job_id = current_task.get() or ("", "")
    alias = using or DEFAULT_DB_ALIAS
    try:
        with transaction.atomic(using=alias):
            ProcessedTask.objects.using(alias).create(key=key, job=job, job_id=job_id)
    except IntegrityError:
        return False
    return True


@contextmanager
def once(key: str, *, using: str | None = None) -> Iterator[bool]:
    """Run a block's database effect once: yield True the first time, False once it committed.

    ::

        with once(f"charge:{order.pk}") as first:
            if first:
                Charge.objects.create(order=order, ...)

    The block runs inside a transaction on `using` (the default database) that also inserts
    the key: both commit together, and an exception inside rolls both back, so the next
    attempt runs the block again. When the key is already there, nothing is written and the
    block runs outside any transaction of ours with False. Inside an outer `atomic()`, the key
    commits (or rolls back) with the outer transaction.

    Two runs racing on one key: the second one's insert waits for the first's transaction and
    then yields False (the first committed) or True (the first rolled back); never both True.
    """
    alias = using or DEFAULT_DB_ALIAS
    with transaction.atomic(using=alias):
        if claim(key, using=alias):
            yield True
            return
    yield False


def task_key(job_id: str) -> str:
    """The ProcessedTask key of an atomic run of task `job_id`."""
    return f"task:{job_id}"


def run_atomically(
    job: str, job_id: str, fn: Callable[[], object], *, using: str | None = None
) -> bool:
    """Run `fn()` in one transaction with the ProcessedTask row of task `job_id`.

    Return True if fn ran and committed, False if an earlier delivery of the task already
    committed (fn is not called: acknowledge the task without running it again). An exception
    from fn rolls back everything it wrote and the row, and propagates.
    """
    with processing(job, job_id), once(task_key(job_id), using=using) as first:
        if first:
            fn()
    return first


def prune_aliases() -> list[str]:
    """The databases that may hold the ProcessedTask table (by the routers)."""
    return [alias for alias in connections if router.allow_migrate_model(alias, ProcessedTask)]


def prune_batch(
    retention: float | timedelta | None = None,
    *,
    batch_size: int = PRUNE_BATCH,
    using: str | None = None,
) -> int:
    """Delete up to `batch_size` rows older than the retention; return how many went.

    One short transaction: the primary keys of a bounded SELECT (oldest first, skipping rows
    another pruner has locked, on PostgreSQL), then a DELETE of exactly those. Never one big
    DELETE, so no lock is held for long and the table stays writable meanwhile.
    """
    if retention is None:
        retention = get_settings().processed_retention
    seconds = retention.total_seconds() if isinstance(retention, timedelta) else retention
    cutoff = timezone.now() - timedelta(seconds=seconds)
    alias = using or DEFAULT_DB_ALIAS
    rows = ProcessedTask.objects.using(alias)
    with transaction.atomic(using=alias):
        pks = list(
            rows.filter(processed_at__lt=cutoff)
            .order_by("processed_at")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:batch_size]
        )
        if pks:
            rows.filter(pk__in=pks).delete()
    return len(pks)
