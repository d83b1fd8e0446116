"""The state of a test's Redis namespace as plain data, for whole-state comparisons.

Snapshots name keys without the namespace (`{default}:t:a`), replace times with their distance
from Redis' own clock ("now" for anything during the test, "now+30" for a lease 30 s away) and
parse the `msg` field, so that a whole namespace compares exactly.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import redis

from tests.conftest import RedisNamespace

#: Hash fields holding a time (epoch seconds, Redis clock).
TIME_FIELDS = frozenset(
    {
        "enqueued_at",
        "started_at",
        "completed_at",
        "failed_at",
        "died_at",
        "next_at",
        "first_unknown_at",
        "cancel_requested_at",
        "canceled_at",
    }
)
#: A past time closer than this to the snapshot is shown as "now": tests last less than this.
RECENT = 10.0
UNCHANGED: Any = object()


# -- snapshot -----------------------------------------------------------------------------------


def redis_now(client: redis.Redis) -> float:
    """Redis' clock, the one every script uses."""
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


#: The longest a snapshot may be read after the script it checks (a loaded machine, a parallel
#: run): a TTL or a time ahead reads up to this much less than it was set to.
SLACK = 3


class Remaining(int):
    """Whole seconds left (of a TTL), read a moment after they were set: equal to the value
    set when it trails it by less than SLACK seconds (time passes: it never reads more)."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Remaining):  # two snapshots: either may be the later one
            return abs(int(other) - int(self)) < SLACK
        if isinstance(other, int) and not isinstance(other, bool):
            return 0 <= other - int(self) < SLACK
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = int.__hash__


class Offset(str):
    """A time as "now+30" (see `when`), equal to the "now+N" it trails by less than SLACK (to
    another snapshot's within SLACK either way)."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            mine, theirs = _seconds(self), _seconds(other)
            if mine is not None and theirs is not None:
                if isinstance(other, Offset):  # two snapshots: either may be the later one
                    return abs(theirs - mine) < SLACK
                return 0 <= theirs - mine < SLACK
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


def _seconds(text: str) -> int | None:
    match = re.fullmatch(r"now([+-]\d+)", text)
    return int(match.group(1)) if match else None


def when(value: float, now: float) -> str:
    """A time as its distance from now in whole seconds: "now", "now+30", "now-7200".

    Rounded up, and compared with SLACK (`Offset`): the snapshot is read a moment after the
    script ran, so a lease set to now+30 reads as now+29.7, or now+28 on a loaded machine.
    """
    offset = value - now
    if -RECENT < offset < 0.5:
        return "now"
    return Offset(f"now{math.ceil(offset):+d}")


def _hash(raw: dict[bytes, bytes], now: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in raw.items():
        name, text = field.decode(), value.decode(errors="backslashreplace")
        if name == "receipt":
            continue  # the fetch's own token (random): tests/integration/test_replay_safety.py
        if name in TIME_FIELDS:
            out[name] = when(float(text), now)
        elif name == "msg":
            try:
                out[name] = json.loads(text)
            except ValueError:
                out[name] = text
        else:
            out[name] = text
    return out


def snapshot(ns: RedisNamespace, now: float | None = None) -> dict[str, tuple[Any, ...]]:
    """Every key under the namespace: name -> (type, content) or (type, content, ttl seconds).

    Times and TTLs are read against `now` (Redis' clock when not given): pass the same `now` to
    two snapshots to compare them exactly however far apart they are read."""
    client: Any = ns.client  # bytes replies
    read_at = redis_now(client)
    now = read_at if now is None else now
    out: dict[str, tuple[Any, ...]] = {}
    for key in ns.keys():
        name = key.removeprefix(f"{ns.namespace}:")
        name = re.sub(r":(processed|failed):\d{4}-\d{2}-\d{2}$", r":\1:<day>", name)
        kind = client.type(key).decode()
        content: Any
        if kind == "string":
            content = client.get(key).decode()
        elif kind == "list":
            content = [v.decode() for v in client.lrange(key, 0, -1)]
        elif kind == "hash":
            content = _hash(client.hgetall(key), now)
        elif kind == "zset":
            content = [
                (m.decode(), when(s, now)) for m, s in client.zrange(key, 0, -1, withscores=True)
            ]
        elif kind == "set":
            content = sorted(v.decode() for v in client.smembers(key))
        else:
            raise AssertionError(f"unexpected {kind} at {key}")
        ttl = client.pttl(key)
        # A TTL as the seconds from `now` to the key's expiry, like the times above: two
        # snapshots given one `now` read an unchanged TTL alike however far apart they are.
        left = read_at + ttl / 1000 - now
        out[name] = (kind, content) if ttl < 0 else (kind, content, Remaining(math.ceil(left)))
    return out


def q(structure: str, queue: str = "default") -> str:
    """A queue key as snapshots name it."""
    return f"{{{queue}}}:{structure}"


def t(task_id: str, queue: str = "default") -> str:
    """A task record key as snapshots name it."""
    return q(f"t:{task_id}", queue)
