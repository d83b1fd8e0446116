"""Lists of tasks across queues, filtered by job name, at a bounded cost per request.

The Inspector pages one queue and one state by index and has no filter, so the API builds its
lists on top of it:

- Each queue is read in the Inspector's own order (newest first by default) and the queues are
  merged on the state's time (`TIME_FIELDS`), as a merge of sorted runs.
- A job filter is applied to what was read. A request reads at most `SCAN_LIMIT` task records
  (or enough for one page of every queue, if that is more), then stops, even if the page is
  not full: the answer holds the matches found so far and a cursor to go on from. A page can
  therefore be short or empty while `next` is set; a client follows `next` until it is null.
- The cursor is each queue's offset into its state, opaque (base64 JSON) to clients. Tasks
  entering or leaving the state between two requests shift the offsets: a task can show up
  twice or be passed over, as with any offset paging over a live queue.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from django_jobs.inspector import Inspector, TaskInfo
from django_jobs.keys import State

#: Most task records one list request reads from Redis (the floor of the scan budget).
SCAN_LIMIT = 1000
#: Largest page the API serves, and its default.
MAX_PER_PAGE = 200
DEFAULT_PER_PAGE = 50
#: Records read per Inspector page while a job filter skips tasks.
FILTER_CHUNK = 100
#: Highest offset a cursor may carry: more than any queue holds (DEAD_MAX_TASKS and the like).
MAX_OFFSET = 10**9

#: The time each state's structure is ordered by, used to merge queues.
TIME_FIELDS = {
    State.SCHEDULED: "next_at",
    State.PENDING: "enqueued_at",
    State.ACTIVE: "started_at",
    State.RETRY: "next_at",
    State.DEAD: "died_at",
    State.COMPLETED: "completed_at",
}


class InvalidCursor(ValueError):
    """The cursor is not one this API handed out: start again without it."""


def encode_cursor(offsets: dict[str, int]) -> str:
    """Return the opaque cursor for each queue's offset."""
    text = json.dumps(offsets, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, queues: tuple[str, ...]) -> dict[str, int]:
    """Return the offsets a cursor holds, only for `queues`; raise InvalidCursor if malformed."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        offsets = json.loads(text)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursor(InvalidCursor.__doc__) from exc
    if not isinstance(offsets, dict) or not all(
        isinstance(queue, str)
        and type(offset) is int  # not bool, not float
        and 0 <= offset <= MAX_OFFSET
        for queue, offset in offsets.items()
    ):
        raise InvalidCursor(InvalidCursor.__doc__)
    # A queue missing from a cursor has been read to its end.
    return {queue: offset for queue, offset in offsets.items() if queue in queues}


@dataclass
class _Run:
    """One queue's tasks in one state, read page by page from an offset."""

    queue: str
    offset: int  # index of the next task to hand out
    read_to: int  # index after the last task read into `buffer`
    more: bool = True  # whether the Inspector has tasks past read_to
    buffer: deque[TaskInfo] = field(default_factory=deque)

    @property
    def finished(self) -> bool:
        return not self.buffer and not self.more


@dataclass(frozen=True)
class Listing:
    """One answer: the tasks found, and where to go on from (None: nothing is left)."""

    items: list[TaskInfo]
    next_offsets: dict[str, int] | None
    #: Tasks in the state in the queues listed, before the job filter.
    total: int
    #: Task records read to answer.
    scanned: int


def _key(task: TaskInfo, state: str) -> float:
    value: datetime | None = getattr(task, TIME_FIELDS[state])
    return value.timestamp() if value is not None else float("-inf")


def list_tasks(
    inspector: Inspector,
    state: str,
    queues: tuple[str, ...],
    *,
    offsets: dict[str, int] | None = None,
    job: str | None = None,
    per_page: int = DEFAULT_PER_PAGE,
    newest_first: bool = True,
) -> Listing:
    """Return up to per_page tasks of `state` in `queues` (of `job`), merged newest first.

    `offsets` is None for the first page, else the next_offsets of the previous answer.
    """
    if not 1 <= per_page <= MAX_PER_PAGE:
        raise ValueError(f"per_page must be 1 to {MAX_PER_PAGE}")
    chunk = per_page if job is None else max(per_page, FILTER_CHUNK)
    # Enough to read two pages of every queue (an offset rarely falls on a page boundary), so
    # that every answer moves forward by at least one task.
    budget = max(SCAN_LIMIT, 2 * chunk * len(queues))
    if offsets is None:
        offsets = dict.fromkeys(queues, 0)
    runs = [_Run(q, offsets[q], offsets[q]) for q in queues if q in offsets]
    found: list[TaskInfo] = []
    scanned = 0
    stopped = False
    while len(found) < per_page:
        for run in runs:
            if run.buffer or not run.more:
                continue
            if scanned >= budget:
                stopped = True
                break
            # The page holding read_to; the tasks before read_to on it were handed out already.
            number = run.read_to // chunk + 1
            page = inspector.tasks(
                run.queue, state, page=number, per_page=chunk, newest_first=newest_first
            )
            scanned += len(page.items)
            fresh = page.items[run.read_to - (number - 1) * chunk :]
            run.buffer.extend(fresh)
            run.read_to += len(fresh)
            run.more = page.has_next and bool(fresh)
        if stopped:
            break
        heads = [run for run in runs if run.buffer]
        if not heads:
            break
        pick = (max if newest_first else min)(heads, key=lambda r: _key(r.buffer[0], state))
        task = pick.buffer.popleft()
        pick.offset += 1
        if job is None or task.job == job:
            found.append(task)
    left = {run.queue: run.offset for run in runs if not run.finished}
    # One more round trip, for a total that does not depend on how far the cursor went.
    total = sum(info.count(state) for info in inspector.queues() if info.name in queues)
    return Listing(items=found, next_offsets=left or None, total=total, scanned=scanned)
