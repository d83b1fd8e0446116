"""The admin's Jobs section: queues, one list of tasks for every state, a task's page, workers,
schedules, flow runs.

One module per page (queues.py, tasks.py, workers.py, schedules.py, flows.py) over what they share
(pages.py): see pages.py for the permissions, how a page reads Redis, and what it says when it
cannot. Importing this package registers the five ModelAdmins (Django's admin autodiscovery
does).
"""

from django_jobs.admin.flows import FlowRunAdmin
from django_jobs.admin.pages import task_url, tasks_url
from django_jobs.admin.queues import QueueAdmin
from django_jobs.admin.schedules import ScheduleAdmin
from django_jobs.admin.tasks import TaskAdmin
from django_jobs.admin.workers import WorkerAdmin

__all__ = [
    "FlowRunAdmin",
    "QueueAdmin",
    "ScheduleAdmin",
    "TaskAdmin",
    "WorkerAdmin",
    "task_url",
    "tasks_url",
]
