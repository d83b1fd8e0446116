"""Models of django-jobs.

Queue, Task, Worker, Schedule and FlowRun have no table (`managed = False`): the tasks and the
flow runs live in Redis, the schedules in the settings. They exist so that the admin lists a
"Jobs" section with these entries and so that the permissions guarding it are ordinary model
permissions, granted like any other (as django-rq does with its Queue model). Every entry
checks Task's permissions:

- ``django_jobs.view_task``: see queues, tasks, workers and schedules;
- ``django_jobs.change_task``: retry tasks (one, selected, all dead), pause and resume queues,
  run a schedule now, pause and resume schedules, cancel flow runs and send them signals;
- ``django_jobs.delete_task``: delete tasks (one, selected, all dead).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Queue(models.Model):
    """No table: the admin's queues page (depths, counters, pause and resume)."""

    class Meta:
        managed = False
        default_permissions = ()

    def __str__(self) -> str:
        return "queue"


class Task(models.Model):
    """No table: the admin's tasks pages, and the permissions of the whole Jobs section."""

    class Meta:
        managed = False
        default_permissions = ("view", "change", "delete")

    def __str__(self) -> str:
        return "task"


class Worker(models.Model):
    """No table: the admin's workers page (heartbeats and what each worker runs)."""

    class Meta:
        managed = False
        default_permissions = ()

    def __str__(self) -> str:
        return "worker"


class Schedule(models.Model):
    """No table: the admin's schedules page (next and last fires, run now, pause, resume)."""

    class Meta:
        managed = False
        default_permissions = ()

    def __str__(self) -> str:
        return "schedule"


class FlowRun(models.Model):
    """No table: the admin's flows pages (runs by status, a run's timeline, cancel, signal).

    The runs live in Redis (django_jobs.flows); the pages check Task's permissions, as the
    rest of the Jobs section does: view_task to look, change_task to cancel and send signals.
    """

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "flow run"

    def __str__(self) -> str:
        return "flow run"


class ProcessedTask(models.Model):
    """A real table: one row per effect that has happened, so that a second run can skip it.

    Written by `django_jobs.once(key)` in the same transaction as the effect itself, so the row
    exists if and only if the effect committed. `key` is unique: two workers inserting one key
    cannot both commit. Rows older than ``JOBS["PROCESSED_RETENTION"]`` are pruned in batches by
    the worker's janitor and by ``manage.py prune_processed`` (the index on `processed_at`).
    """

    key = models.CharField(max_length=255, unique=True)
    #: The registered name of the job that wrote the row ("" outside a job).
    job = models.CharField(max_length=200, blank=True, default="")
    #: The id of the task that wrote the row ("" outside a job).
    job_id = models.CharField(max_length=64, blank=True, default="")
    processed_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        verbose_name = "processed task"

    def __str__(self) -> str:
        return self.key


class OutboxJob(models.Model):
    """A real table: an enqueue written in its transaction, not yet accepted by Redis.

    With ``JOBS["OUTBOX"]`` (or ``enqueue(..., outbox=True)``) an enqueue inserts its row in the
    caller's transaction, so a rollback enqueues nothing. After the commit the enqueuing process
    sends its rows to Redis and deletes them (the fast path); what it could not send (Redis
    down, the process died) a worker's relay sends later, oldest id first (django_jobs.worker
    .relay). A row is deleted only once Redis accepted its task.
    """

    #: The task's id: sending a row twice leaves one task (the enqueue script refuses an id it
    #: has already written).
    job_id = models.CharField(max_length=64, unique=True)
    #: The registered name of the job.
    job = models.CharField(max_length=200)
    queue = models.CharField(max_length=200)
    #: The encoded message, as Redis stores it.
    message = models.TextField()
    #: When it is due and its idempotency window: {"delay": s, "eta": epoch s or null,
    #: "idempotency_window": s}.
    options = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    #: Sends that failed (Redis refused the task, or its queue or job is unknown to the relay).
    attempts = models.PositiveIntegerField(default=0)
    #: Why the last send failed, and what to do about it ("" until one fails).
    last_error = models.TextField(blank=True, default="")
    #: A row whose send failed waits until then (None: due now), so it holds up no other row.
    retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "outbox job"

    def __str__(self) -> str:
        return f"{self.job} {self.job_id}"


class OutboxRelay(models.Model):
    """A real table of one row: which worker relayed the outbox last, and when.

    Its timestamp feeds the system check that warns when the outbox is on and no worker has
    relayed for a while. On SQLite the row is also the single-relay lock (`holder`, until
    `lease_until`): one worker at a time relays there.
    """

    name = models.CharField(max_length=50, primary_key=True, default="relay")
    worker = models.CharField(max_length=200, blank=True, default="")
    relayed_at = models.DateTimeField(null=True, blank=True)
    #: Tasks relayed by that worker's last tick.
    sent = models.PositiveIntegerField(default=0)
    holder = models.CharField(max_length=200, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "outbox relay"

    def __str__(self) -> str:
        return self.name
