"""`JobsBackend`: Django's tasks framework (`django.tasks`) on django-jobs' broker and workers.

    TASKS = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend"}}

Each enqueue is one task of the job `DjangoTask` (run.py), so retries, timeouts, crash recovery,
idempotency keys, the dead set, the admin and the API apply to it. The constructor reads
settings only: `@task` builds the backend at import time, and a project without Redis imports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.core import checks
from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued

from django_jobs.broker.factory import get_broker
from django_jobs.broker.results import RunRecord, locate, read
from django_jobs.broker.shards import shards_for
from django_jobs.client import Options, enqueue
from django_jobs.conf import get_settings, settings_errors, to_seconds
from django_jobs.exceptions import JobsDisabled
from django_jobs.message import DecodeError, payload_from_json
from django_jobs.tasks.result import build
from django_jobs.tasks.run import DJANGO_TASK_JOBS, DjangoTask, SensitiveDjangoTask, inline_results
from django_jobs.tasks.task import (
    JobsTask,
    TaskPayload,
    current_key,
    now,
    payload_for,
    task_of,
)

#: Django's priority (-100..100) onto our queues, when a task's queue_name is Django's default:
#: the first (minimum priority, queue) whose minimum the priority reaches. OPTIONS["PRIORITIES"].
PRIORITIES: tuple[tuple[int, str], ...] = ((1, "critical"), (0, "default"), (-100, "low"))


class JobsBackend(BaseTaskBackend):
    """Run Django tasks on `manage.py runworker`: see docs/django-tasks.rst."""

    task_class = JobsTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        #: TASKS QUEUES, or None: JOBS["QUEUES"], read when first needed (the settings may be
        #: invalid while the backend is built: `check` reports that, it does not raise).
        self._queues: set[str] | None = self._queues if "QUEUES" in params else None
        self.priorities = tuple(
            (int(low), str(queue)) for low, queue in self.options.get("PRIORITIES", PRIORITIES)
        )

    @property
    def queues(self) -> set[str]:
        return set(get_settings().queues) if self._queues is None else self._queues

    @queues.setter
    def queues(self, value: set[str]) -> None:
        self._queues = value

    def queue_for(self, task: Task[..., Any]) -> str:
        """Our queue for a task: its queue_name, or for Django's default queue name the queue
        its priority maps to (OPTIONS["PRIORITIES"])."""
        if task.queue_name != DEFAULT_TASK_QUEUE_NAME:
            return task.queue_name
        return next((q for low, q in self.priorities if task.priority >= low), task.queue_name)

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        configured = get_settings().queues
        queue = self.queue_for(task)
        if queue not in configured:
            raise InvalidTask(
                f"Task {task.module_path} would go to queue {queue!r}, which is not one of "
                f"JOBS['QUEUES'] ({', '.join(configured)}): use one of those, or map the "
                f"priorities onto them in TASKS[{self.alias!r}]['OPTIONS']['PRIORITIES']."
            )
        if isinstance(task, JobsTask):
            if task.max_attempts is not None and (
                not isinstance(task.max_attempts, int) or task.max_attempts < 1
            ):
                raise InvalidTask(f"max_attempts must be 1 or more, got {task.max_attempts!r}")
            if task.timeout is not None and not to_seconds(task.timeout) > 0:
                raise InvalidTask(f"timeout must be a positive duration, got {task.timeout!r}")
            if task.retention is not None and not to_seconds(task.retention) >= 0:
                raise InvalidTask(f"retention must be 0 or more, got {task.retention!r}")
            if not isinstance(task.sensitive, bool):
                raise InvalidTask(f"sensitive must be True or False, got {task.sensitive!r}")

    def enqueue(  # type: ignore[override]  # the stubs' generic signature
        self, task: Task[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult[..., Any]:
        """Enqueue one run of task: at once, or at task.run_after.

        Raises TypeError naming an argument JSON cannot hold; DuplicateJob inside an
        `idempotency_key` block whose key was taken within its window; BrokerUnavailable.
        """
        self.validate_task(task)
        settings = get_settings()
        options = _options(task)
        max_attempts = options.max_attempts or settings.max_attempts
        retention = settings.retention if options.retention is None else options.retention
        enqueued_at = now()
        payload = payload_for(
            task, args, kwargs, enqueued_at=enqueued_at, max_attempts=max_attempts,
            retention=to_seconds(retention),
        )  # fmt: skip
        key = current_key()
        scoped = None if key is None else f"{task.module_path}:{key}"
        queue = self.queue_for(task)
        # Django's enqueue happens now; to wait for a commit, call it in transaction.on_commit.
        job = SensitiveDjangoTask if getattr(task, "sensitive", False) else DjangoTask
        handle = enqueue(job, [(payload, scoped)],
                         Options(queue=queue, eta=task.run_after, max_attempts=max_attempts,
                                 timeout=options.timeout, retention=retention),
                         on_commit=False)[0]  # fmt: skip
        result = inline_results.pop(handle.id, None) or build(
            task, handle.id, payload, None, RunRecord(), status=_enqueued(handle.state)
        )
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task's result as Redis holds it now; TaskResultDoesNotExist when Redis holds
        nothing of it (never enqueued here, or past its retention)."""
        try:
            broker = get_broker()
        except JobsDisabled as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from None
        queues = shards_for(broker.settings).expand(get_settings().queues)  # each shard
        queue = locate(broker, queues, str(result_id))
        if queue is None:
            raise TaskResultDoesNotExist(result_id)
        (info,) = broker.task_infos(queue, [result_id])
        record = read(broker, queue, result_id)
        data = info.payload if info is not None and info.job in DJANGO_TASK_JOBS else None
        try:
            if data is None and record.payload:
                data = json.loads(record.payload)
            if data is None:
                raise TaskResultDoesNotExist(f"{result_id} is not a Django task's id")
            payload = payload_from_json(data, TaskPayload)
            task = task_of(payload)
        except (DecodeError, ValueError) as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
        return build(task, result_id, payload, info, record)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if settings_errors():
            return []  # JOBS itself is wrong: its own checks (E001-E0xx) say how
        configured = get_settings().queues
        errors: list[checks.CheckMessage] = []
        unknown = sorted(set(self.queues) - set(configured))
        if unknown:
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]['QUEUES'] names queues that are not in JOBS['QUEUES']: "
                f"{', '.join(unknown)}.",
                hint="Configure them in JOBS['QUEUES'], or leave TASKS QUEUES out (it defaults "
                "to JOBS['QUEUES']).",
                id="django_jobs.E030",
            ))  # fmt: skip
        mapped = sorted({q for _, q in self.priorities} - set(configured))
        lows = [low for low, _ in self.priorities]
        if mapped or not lows or lows != sorted(lows, reverse=True) or lows[-1] > -100:
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]['OPTIONS']['PRIORITIES'] must list (minimum priority, "
                f"queue) pairs, minimums falling to -100, on queues of JOBS['QUEUES']; it is "
                f"{list(self.priorities)!r}"
                + (f" (not configured: {', '.join(mapped)})" if mapped else "") + ".",
                hint=f"For example [(-100, {configured[0]!r})] puts every priority on one queue; "
                "the default is [(1, 'critical'), (0, 'default'), (-100, 'low')].",
                id="django_jobs.E031",
            ))  # fmt: skip
        return errors


def _options(task: Task[..., Any]) -> Options:
    if not isinstance(task, JobsTask):
        return Options()
    retention = None if task.retention is None else to_seconds(task.retention)
    return Options(max_attempts=task.max_attempts, timeout=task.timeout, retention=retention)


def _enqueued(state: str) -> TaskResultStatus:
    """The status of a task as its enqueue left it (with Redis unset: as the inline run or the
    skip left it)."""
    if state == "completed":
        return TaskResultStatus.SUCCESSFUL
    if state == "dead":
        return TaskResultStatus.FAILED
    return TaskResultStatus.READY
