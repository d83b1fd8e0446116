"""How `manage.py jobs` prints: aligned tables, UTC times, short durations, and JSON."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def jsonable(value: Any) -> Any:
    """Dataclasses as dicts, tuples as lists, datetimes as ISO 8601 in UTC, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def to_json(value: Any) -> str:
    """The JSON a `--json` run prints: one document, indented."""
    return json.dumps(jsonable(value), indent=2, sort_keys=False)


def when(value: datetime | None) -> str:
    """A time as the tables show it, in UTC to the second ('-' for none)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def duration(seconds: float | None) -> str:
    """A short duration: '45s', '3m 05s', '2h 10m', '3d 4h' ('-' for none)."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def shorten(text: str | None, width: int) -> str:
    """One line of at most width characters ('-' for none)."""
    if not text:
        return "-"
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Aligned columns under upper-case headers; numbers are right-aligned."""
    cells = [[str(h).upper() for h in headers]] + [[str(c) for c in row] for row in rows]
    numeric = [
        bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(len(headers))
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return lines
