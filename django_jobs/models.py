"""Models of django-jobs.

Queue, Task, Worker and Schedule have no table (`managed = False`): the tasks live in Redis, the
schedules in the settings. They exist so that the admin lists a "Jobs" section with four entries
and so that the permissions guarding it are ordinary model permissions, granted like any other
(as django-rq does with its Queue model). All four entries check Task's permissions:

- ``django_jobs.view_task``: see queues, tasks, workers and schedules;
- ``django_jobs.change_task``: retry tasks (one, selected, all dead), pause and resume queues,
  run a schedule now, pause and resume schedules;
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
