"""The API's paging of the Inspector's task listing (`Inspector.list_tasks`): its cursor and
its scan budget.

- A job filter is decided in Redis (read_fields.lua: a record that does not match leaves a
  mark, not itself). A request visits at most `SCAN_LIMIT` task records (or enough for one page
  of every queue, if that is more), then stops, even if the page is not full: the answer holds
  the matches found so far and a cursor to go on from. A page can therefore be short or empty
  while `next` is set; a client follows `next` until it is null.
- The cursor is each queue's offset into its state, opaque (base64 JSON) to clients
  (django_jobs.cursor, shared with the admin's links).
"""

from __future__ import annotations

from django_jobs.cursor import MAX_OFFSET, InvalidCursor, decode_cursor, encode_cursor

__all__ = [
    "DEFAULT_PER_PAGE",
    "FILTER_CHUNK",
    "MAX_OFFSET",
    "MAX_PER_PAGE",
    "SCAN_LIMIT",
    "InvalidCursor",
    "bounds",
    "decode_cursor",
    "encode_cursor",
]

#: Most task records one list request reads from Redis (the floor of the scan budget).
SCAN_LIMIT = 1000
#: Largest page the API serves, and its default.
MAX_PER_PAGE = 200
DEFAULT_PER_PAGE = 50
#: Records read per Inspector page while a job filter skips tasks.
FILTER_CHUNK = 100


def bounds(job: str | None, per_page: int, queues: int) -> tuple[int, int]:
    """The chunk (records read per round trip) and the budget (records per request) of a list
    of per_page tasks over a number of queues, with or without a job filter."""
    chunk = per_page if job is None else max(per_page, FILTER_CHUNK)
    # Enough to read two pages of every queue (an offset rarely falls on a page boundary), so
    # that every answer moves forward by at least one task.
    return chunk, max(SCAN_LIMIT, 2 * chunk * queues)
