"""The API's paging of the Inspector's task listing (`Inspector.list_tasks`): its cursor and
its scan budget.

- A job filter is applied to what was read. A request reads at most `SCAN_LIMIT` task records
  (or enough for one page of every queue, if that is more), then stops, even if the page is
  not full: the answer holds the matches found so far and a cursor to go on from. A page can
  therefore be short or empty while `next` is set; a client follows `next` until it is null.
- The cursor is each queue's offset into its state, opaque (base64 JSON) to clients.
"""

from __future__ import annotations

import base64
import binascii
import json

#: Most task records one list request reads from Redis (the floor of the scan budget).
SCAN_LIMIT = 1000
#: Largest page the API serves, and its default.
MAX_PER_PAGE = 200
DEFAULT_PER_PAGE = 50
#: Records read per Inspector page while a job filter skips tasks.
FILTER_CHUNK = 100
#: Highest offset a cursor may carry: more than any queue holds (DEAD_MAX_TASKS and the like).
MAX_OFFSET = 10**9


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


def bounds(job: str | None, per_page: int, queues: int) -> tuple[int, int]:
    """The chunk (records read per round trip) and the budget (records per request) of a list
    of per_page tasks over a number of queues, with or without a job filter."""
    chunk = per_page if job is None else max(per_page, FILTER_CHUNK)
    # Enough to read two pages of every queue (an offset rarely falls on a page boundary), so
    # that every answer moves forward by at least one task.
    return chunk, max(SCAN_LIMIT, 2 * chunk * queues)
