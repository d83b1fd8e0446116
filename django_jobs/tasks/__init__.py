"""Django's tasks framework on django-jobs: ``TASKS = {"default": {"BACKEND":
"django_jobs.tasks.JobsBackend"}}`` (Django 6.0 or later; see docs/django-tasks.rst)."""

from __future__ import annotations

import django

if django.VERSION < (6, 0):  # pragma: no cover  (the Django 5.2 leg never imports this)
    raise ImportError(
        f"django_jobs.tasks needs Django's tasks framework (django.tasks, Django 6.0 or later); "
        f"this is Django {django.get_version()}. Use Job classes (django_jobs.Job), or upgrade."
    )

from django_jobs.tasks.backend import PRIORITIES, JobsBackend
from django_jobs.tasks.run import DjangoTask, ReturnValueTooLarge, UnsupportedReturnValue
from django_jobs.tasks.task import JobsTask, idempotency_key, task

__all__ = [
    "PRIORITIES",
    "DjangoTask",
    "JobsBackend",
    "JobsTask",
    "ReturnValueTooLarge",
    "UnsupportedReturnValue",
    "idempotency_key",
    "task",
]
