"""A Django `TaskResult` from what Redis holds: the task's record (its state) and the record
its runs left (broker/results.py).

Status: scheduled, pending and retry are READY; active is RUNNING; completed is SUCCESSFUL and
dead is FAILED. The runs' own outcome wins over an active state (the function returned or failed
for good, and the acknowledgement is on its way), and stands alone once the task's record is
gone while the runs' record is still kept.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError

from django_jobs.broker.info import TaskInfo
from django_jobs.broker.results import RunRecord
from django_jobs.keys import State
from django_jobs.tasks.task import TaskPayload, at

STATUSES = {
    State.SCHEDULED: TaskResultStatus.READY,
    State.PENDING: TaskResultStatus.READY,
    State.RETRY: TaskResultStatus.READY,
    State.ACTIVE: TaskResultStatus.RUNNING,
    State.COMPLETED: TaskResultStatus.SUCCESSFUL,
    State.DEAD: TaskResultStatus.FAILED,
}

FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)

#: What a worker writes as a dead task's error when no exception of the function says why.
STOPPED_BY = {"JobTimeout": "django_jobs.exceptions.JobTimeout"}


def status_of(info: TaskInfo | None, record: RunRecord) -> TaskResultStatus:
    state = STATUSES.get(info.state) if info is not None else None
    if record.outcome in TaskResultStatus.values and state in (None, TaskResultStatus.RUNNING):
        return TaskResultStatus(record.outcome)
    return state or TaskResultStatus.READY


def build(
    task: Task[..., Any],
    task_id: str,
    payload: TaskPayload,
    info: TaskInfo | None,
    record: RunRecord,
    *,
    status: TaskResultStatus | None = None,
) -> TaskResult[..., Any]:
    """The TaskResult of one task (`status` given: as the caller knows it, for a run)."""
    status = status or status_of(info, record)
    errors = [TaskError(exception_class_path=e.exception_class_path, traceback=e.traceback)
              for _, e in record.errors]  # fmt: skip
    finished = record.finished_at
    if info is not None and status is TaskResultStatus.FAILED and finished is None:
        # Dead with no run saying so: killed past its timeout's grace, or it crashed its worker
        # too often. The worker's reason is the last error.
        finished = info.died_at.timestamp() if info.died_at else None
        if info.error and len(errors) < len(record.worker_ids or [None]):
            kind = info.error.partition(":")[0]
            errors.append(TaskError(
                exception_class_path=STOPPED_BY.get(kind, "django_jobs.exceptions.JobsError"),
                traceback=info.traceback or info.error,
            ))  # fmt: skip
    if info is not None and status is TaskResultStatus.SUCCESSFUL and finished is None:
        finished = info.completed_at.timestamp() if info.completed_at else None
    enqueued = datetime.fromisoformat(payload.enqueued_at) if payload.enqueued_at else None
    result = TaskResult(
        task=task,
        id=task_id,
        status=status,
        enqueued_at=enqueued,
        started_at=at(record.started_at),
        finished_at=at(finished) if status in FINISHED else None,
        last_attempted_at=at(record.last_attempted_at),
        args=payload.args,
        kwargs=payload.kwargs,
        backend=payload.backend,
        errors=errors,
        worker_ids=list(record.worker_ids),
    )
    if status is TaskResultStatus.SUCCESSFUL and record.return_json:
        object.__setattr__(result, "_return_value", json.loads(record.return_json))
    return result
