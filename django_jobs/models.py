"""Models of django-jobs.

Queue, Task and Worker have no table (`managed = False`): the tasks live in Redis. They exist so
that the admin lists a "Jobs" section with three entries and so that the permissions guarding it
are ordinary model permissions, granted like any other (as django-rq does with its Queue model).
All three entries check Task's permissions:

- ``django_jobs.view_task``: see queues, tasks and workers;
- ``django_jobs.change_task``: retry tasks (one, selected, all dead), pause and resume queues;
- ``django_jobs.delete_task``: delete tasks (one, selected, all dead).
"""

from __future__ import annotations

from django.db import models


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
