"""What a Django task enqueue carries: `JobsTask` (Django's `Task` with our options), the payload
of the internal job that runs it, and the per-enqueue idempotency key (`idempotency_key`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task, task_backends
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    _Task = Task[..., Any]  # generic in the stubs only
else:
    _Task = Task


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsTask(_Task):
    """Django's Task with django-jobs' options: ``@task(max_attempts=3,
    timeout=timedelta(seconds=30), retention=timedelta(hours=1))``. None: the JOBS setting."""

    #: Runs in all (the first, then retries with the backoff); None: JOBS["MAX_ATTEMPTS"].
    max_attempts: int | None = None
    #: Seconds (or a timedelta) a run may take before JobTimeout; None: JOBS["TIMEOUT"].
    timeout: timedelta | float | None = None
    #: How long the result is kept after the task finished; None: JOBS["RETENTION"].
    retention: timedelta | float | None = None
    #: Its arguments carry personal data: the admin, the API, the CLI and the errors show them
    #: redacted, as a `Job.sensitive` job's payload (it runs as SensitiveDjangoTask).
    sensitive: bool = False


def task(
    function: Callable[..., Any] | None = None,
    *,
    priority: int = 0,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    **options: Any,
) -> Any:
    """Django's ``@task`` with our options on every Django from 6.0 on: Django 6.0's decorator
    passes no extra keyword to the backend's task_class (6.1's does, so there
    ``django.tasks.task(max_attempts=3)`` works as well)::

        @task(max_attempts=3, timeout=timedelta(seconds=30))
        def send_digest(day: str) -> None: ...
    """
    if "run_after" in options:
        raise TypeError("run_after cannot be set on @task: use .using(run_after=...)")

    def wrapper(f: Callable[..., Any]) -> Any:
        return task_backends[backend].task_class(
            func=f, priority=priority, queue_name=queue_name, backend=backend,
            takes_context=takes_context, run_after=None, **options,
        )  # fmt: skip

    return wrapper(function) if function is not None else wrapper


@dataclass(frozen=True)
class TaskPayload:
    """The payload of the job that runs one Django task: the function and what to call it with,
    the Task's attributes (to rebuild it in the worker and in get_result) and when it was
    enqueued. Plain JSON values."""

    func: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    queue_name: str = "default"
    #: ISO 8601, or None.
    run_after: str | None = None
    backend: str = "default"
    takes_context: bool = False
    #: ISO 8601.
    enqueued_at: str = ""
    #: Resolved at enqueue, so the worker knows which failure is the last.
    max_attempts: int = 1
    #: Seconds the result is kept after the task finished.
    retention: float = 0.0


def to_json(name: str, value: Any, sensitive: bool = False) -> Any:
    """The JSON form of an argument, or TypeError naming it (Django's normalize_json, then a
    JSON round trip that must give the same value back); a sensitive one's value unquoted."""
    try:
        normal = normalize_json(value)
        text = json.dumps(normal)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"argument {name} of the task cannot be stored as JSON: {exc}. Pass JSON values "
            f"(str, int, float, bool, None, lists, dicts with str keys), and references (ids) "
            f"rather than objects."
        ) from None
    if json.loads(text) != normal and sensitive:
        raise TypeError(
            f"argument {name} of the task does not survive a JSON round trip (its value not "
            f"shown: a sensitive task): use str keys in dicts."
        )
    if json.loads(text) != normal:
        raise TypeError(
            f"argument {name} of the task does not survive a JSON round trip ({value!r} comes "
            f"back as {json.loads(text)!r}): use str keys in dicts."
        )
    return normal


def payload_for(
    task: Task[..., Any], args: Any, kwargs: Any, *, enqueued_at: datetime, max_attempts: int,
    retention: float,
) -> TaskPayload:  # fmt: skip
    """The payload for one enqueue of task; TypeError naming an argument JSON cannot hold."""
    hide = bool(getattr(task, "sensitive", False))
    json_args = [to_json(f"#{n}" if hide else f"#{n} ({value!r})", value, hide)
                 for n, value in enumerate(args)]  # fmt: skip
    json_kwargs = {str(k): to_json(f"{k}=", v, hide) for k, v in dict(kwargs).items()}
    return TaskPayload(
        func=task.module_path,
        args=json_args,
        kwargs=json_kwargs,
        priority=task.priority,
        queue_name=task.queue_name,
        run_after=None if task.run_after is None else task.run_after.isoformat(),
        backend=task.backend,
        takes_context=task.takes_context,
        enqueued_at=enqueued_at.isoformat(),
        max_attempts=max_attempts,
        retention=retention,
    )


def task_of(payload: TaskPayload) -> Task[..., Any]:
    """The Task a payload was enqueued from (the module's task with the enqueue's using()).

    Raises ValueError when the function's module path no longer names a task.
    """
    try:
        base = import_string(payload.func)
    except ImportError as exc:
        raise ValueError(
            f"{payload.func!r} cannot be imported ({exc}): is this process's code up to date?"
        ) from exc
    if not isinstance(base, Task):
        raise ValueError(f"{payload.func!r} is not a task (decorate it with @task)")
    run_after = None if payload.run_after is None else datetime.fromisoformat(payload.run_after)
    return replace(base, priority=payload.priority, queue_name=payload.queue_name,
                   run_after=run_after, backend=payload.backend)  # fmt: skip


def at(timestamp: float | None) -> datetime | None:
    """An epoch time as Django shows it: aware in UTC with USE_TZ, naive local time without."""
    if timestamp is None:
        return None
    if settings.USE_TZ:
        return datetime.fromtimestamp(timestamp, UTC)
    return datetime.fromtimestamp(timestamp)


def now() -> datetime:
    return timezone.now()


_key: ContextVar[str | None] = ContextVar("django_jobs_task_idempotency_key", default=None)


@contextmanager
def idempotency_key(key: str) -> Iterator[None]:
    """Give the task enqueues inside the block this idempotency key (Django's enqueue has no
    place for one)::

        with idempotency_key(f"welcome:{user.pk}"):
            send_welcome.enqueue(user.pk)   # DuplicateJob if enqueued within the window

    The key is scoped to the task's function; the window is JOBS["IDEMPOTENCY_WINDOW"].
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"idempotency_key must be a non-empty str, got {key!r}")
    token = _key.set(key)
    try:
        yield
    finally:
        _key.reset(token)


def current_key() -> str | None:
    """The idempotency key of the enclosing `idempotency_key` block, or None."""
    return _key.get()
