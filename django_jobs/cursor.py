"""The cursor of the task listing (`Inspector.list_tasks`): each queue's offset into a state,
opaque (base64 JSON) to whoever pages with it, the API's clients and the admin's links alike.
"""

from __future__ import annotations

import base64
import binascii
import json

__all__ = ["MAX_OFFSET", "InvalidCursor", "decode_cursor", "encode_cursor"]

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
    # A queue missing from a cursor has been read to its end. A sharded queue's offsets are its
    # shards' ("<queue>#<n>": keys.logical_queue, not imported: one layer).
    return {q: offset for q, offset in offsets.items() if q.partition("#")[0] in queues}
