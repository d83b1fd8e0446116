"""What the tasks list shows: its query string (`ListQuery`), its columns and its rows."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import Http404, HttpRequest

from django_jobs.admin.pages import url
from django_jobs.conf import get_settings
from django_jobs.conf.redact import redacted
from django_jobs.cursor import encode_cursor
from django_jobs.inspector import TaskInfo
from django_jobs.keys import State
from django_jobs.message import NO_RECORD

#: Columns of the tasks list for each state, after id, queue and job (the payload and the
#: idempotency key are on the task's page): (heading, TaskInfo attribute).
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    State.SCHEDULED: (("Due", "next_at"), ("Enqueued", "enqueued_at")),
    State.PENDING: (("Enqueued", "enqueued_at"), ("Failed runs", "attempts")),
    State.ACTIVE: (("Started", "started_at"), ("Failed runs", "attempts")),
    State.RETRY: (
        ("Last error", "error"),
        ("Next attempt", "next_at"),
        ("Failed runs", "attempts"),
        ("Failed", "failed_at"),
    ),
    State.DEAD: (
        ("Last error", "error"),
        ("Died", "died_at"),
        ("Failed runs", "attempts"),
        ("Crashes", "crashes"),
    ),
    State.COMPLETED: (("Completed", "completed_at"), ("Enqueued", "enqueued_at")),
    State.CANCELED: (("Canceled", "canceled_at"), ("Enqueued", "enqueued_at")),
}


#: Longest search, job filter or cursor read from the query string (longer ones are cut): more
#: than any job name, idempotency key or cursor of ours.
MAX_INPUT = 1000

#: The jobs that run Django's @task functions (django_jobs.tasks): shown by the function's path.
DJANGO_TASKS = ("django_jobs.DjangoTask", "django_jobs.SensitiveDjangoTask")


def job_name(task: TaskInfo) -> str:
    """The job's name as the admin shows it: a Django task's function path ("" undecodable)."""
    func = task.payload.get("func") if task.payload else None
    if task.job in DJANGO_TASKS and isinstance(func, str):
        return f"{func} (@task)"
    return task.job or ""


@dataclass(frozen=True)
class Row:
    """A task on the tasks list, with the cells of its state's columns."""

    task: TaskInfo
    url: str
    #: (TaskInfo attribute, value, heading) for each of the state's COLUMNS.
    cells: list[tuple[str, object, str]]
    #: The idempotency key split around the searched text: (before, match, after), or None.
    matched: tuple[str, str, str] | None = None

    @property
    def key(self) -> object:
        """The idempotency key as the list shows it (a sensitive job's redacted)."""
        return redacted(self.task.idempotency_key, self.task.sensitive)

    @property
    def job_parts(self) -> list[str]:
        """The job's dotted name in parts, so that it can break at its dots."""
        return job_name(self.task).split(".")

    @property
    def unreadable(self) -> str:
        """What the job cell says of a record that cannot be read ("" when it can)."""
        if not self.task.decode_error:
            return ""
        return "(no record)" if self.task.decode_error == NO_RECORD else "(undecodable)"


@dataclass(frozen=True)
class ListQuery:
    """What the tasks list shows, read from the query string."""

    #: One queue, or "" for every queue.
    queue: str
    state: str
    job: str
    query: str
    newest_first: bool
    page: int
    #: Where the listing goes on from (a cursor of the Inspector's listing), or "".
    at: str

    @classmethod
    def from_request(cls, request: HttpRequest) -> ListQuery:
        queues = get_settings().known_queues
        get = request.GET
        queue = get.get("queue", "")
        state = get.get("state") or State.DEAD
        if (queue and queue not in queues) or state not in State.ALL:
            raise Http404("Unknown queue or state.")
        return cls(
            queue=queue,
            state=state,
            job=get.get("job", "")[:MAX_INPUT],
            query=get.get("q", "").strip()[:MAX_INPUT],
            newest_first=get.get("o") != "oldest",
            page=_number(get.get("p"), 1),
            at=get.get("at", "")[:MAX_INPUT] or _start(queue, get.get("start")),
        )

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues listed."""
        return (self.queue,) if self.queue else get_settings().known_queues

    @property
    def paged(self) -> bool:
        """Whether the list is paged by number (one queue of one shard, no filter) rather than
        by cursor (which merges several queues, or a sharded queue's shards, on the time)."""
        if not self.queue or self.job or self.query:
            return False
        return get_settings().queue_shards.get(self.queue, 1) == 1

    def url(self, **changes: str | int) -> str:
        """This list's URL with some parameters changed (paging starts over unless given)."""
        query: dict[str, str | int] = {"queue": self.queue, "state": self.state}
        if self.job:
            query["job"] = self.job
        if self.query:
            query["q"] = self.query
        if not self.newest_first:
            query["o"] = "oldest"
        query.update(changes)
        return url("task_changelist", **{k: v for k, v in query.items() if v != ""})


def _number(value: str | None, least: int) -> int:
    try:
        return max(least, int(value or least))
    except ValueError:
        return least


def _start(queue: str, start: str | None) -> str:
    """The cursor of `start=N` (one queue's offset, as links of earlier versions held), or ""."""
    offset = _number(start, 0)
    return encode_cursor({queue: offset}) if queue and offset else ""


def attempts(task: TaskInfo) -> object:
    return f"{task.attempts} of {task.max_attempts}" if task.max_attempts else task.attempts


def matched(key: str | None, query: str) -> tuple[str, str, str] | None:
    """The idempotency key split around the first occurrence of query, or None."""
    if not (key and query) or (at := key.find(query)) < 0:
        return None
    return key[:at], key[at : at + len(query)], key[at + len(query) :]
