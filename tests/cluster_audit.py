"""Which broker calls would span Redis Cluster slots (issue 20): a pytest plugin.

    pytest -p tests.cluster_audit tests/integration/test_broker.py ... -p no:xdist

records, for every script call (by name) and every multi-key command the tests make, how many
calls there were and how many named keys in more than one slot, and prints the table at the
end. Keys a script builds inside Lua from a queue's prefix are not seen (they share the
prefix's slot). docs/scale-redis.rst quotes its table.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from redis.cluster import key_slot

from django_jobs.broker import connection, scripts

#: Multi-key commands the broker may send outside scripts (BLPOP's last argument is its timeout).
MULTI_KEY = {"BLPOP", "DEL", "UNLINK", "EXISTS", "MGET"}

#: name: [calls, calls spanning slots, one example of the keys of such a call]
SEEN: dict[str, list[Any]] = defaultdict(lambda: [0, 0, ""])
NAMES = {
    hashlib.sha1(source.encode()).hexdigest(): name for name, source in scripts.SOURCES.items()
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def record(command: Sequence[Any]) -> None:
    if not command:
        return
    verb = _text(command[0]).upper()
    if verb == "EVALSHA":
        count = int(command[2])
        keys, name = command[3 : 3 + count], NAMES.get(_text(command[1]), "(unknown script)")
    elif verb in MULTI_KEY:
        keys, name = command[1:-1] if verb == "BLPOP" else command[1:], verb
    else:
        return
    names = [_text(key) for key in keys]
    entry = SEEN[name]
    entry[0] += 1
    if len({key_slot(key.encode()) for key in names}) > 1:
        entry[1] += 1
        entry[2] = entry[2] or " ".join(names)[:200]


def _wrap(owner: Any, attribute: str, each: bool = False) -> None:
    original = getattr(owner, attribute)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        for command in args[0] if each else [args]:
            record(command)
        return original(self, *args, **kwargs)

    setattr(owner, attribute, wrapper)


def pytest_configure(config: pytest.Config) -> None:
    _wrap(redis.Redis, "execute_command")
    _wrap(redis.client.Pipeline, "pipeline_execute_command")
    _wrap(connection.ScriptCalls, "_round_trip", each=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line("\ncalls that name keys in more than one Cluster slot:")
    for name, (calls, spanning, example) in sorted(SEEN.items()):
        terminalreporter.write_line(f"  {name:14} {spanning:5} of {calls:5}  {example}")
    unseen = sorted(set(scripts.SOURCES) - set(SEEN))
    terminalreporter.write_line(f"  scripts not called by these tests: {', '.join(unseen)}")
