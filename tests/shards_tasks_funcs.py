"""A module-level `@task` for tests/integration/test_shards_tasks.py (Django 6.0 or later): it
reads its own result while it runs."""

from __future__ import annotations

from django.tasks import TaskContext, task


@task(takes_context=True)
def own_status(context: TaskContext) -> str:
    return str(own_status.get_result(context.task_result.id).status)
