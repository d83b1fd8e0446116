"""The admin's Jobs section: queues, one list of tasks for every state, a task's page, workers.

One module per page (queues.py, tasks.py, workers.py) over what they share (pages.py): see
pages.py for the permissions, how a page reads Redis, and what it says when it cannot.
Importing this package registers the three ModelAdmins (Django's admin autodiscovery does).
"""

from django_jobs.admin.pages import task_url, tasks_url
from django_jobs.admin.queues import QueueAdmin
from django_jobs.admin.tasks import TaskAdmin
from django_jobs.admin.workers import WorkerAdmin

__all__ = ["QueueAdmin", "TaskAdmin", "WorkerAdmin", "task_url", "tasks_url"]
