"""Which broker calls would span Redis Cluster slots (issue 20): a recorder and a pytest plugin.

`recording()` records, while it is open, every script call (by name), every multi-key command
and every MULTI transaction sent to Redis: how many calls there were and how many named keys
in more than one slot. tests/integration/test_cluster_slots.py runs every script under it and
fails on any call that spans slots. As a plugin,

    pytest -p tests.cluster_audit tests/integration/test_broker.py ... -p no:xdist

records a whole run and prints the table at the end (the tests' own clean-up DELs span slots
too). Keys a script builds inside Lua from a queue's prefix are not seen (they share the
prefix's slot).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from django_jobs.broker import connection, scripts

#: Multi-key commands the broker may send outside scripts (BLPOP's last argument is its timeout).
MULTI_KEY = {"BLPOP", "DEL", "UNLINK", "EXISTS", "MGET"}
#: Commands without a key (routed by node on a Cluster, or none at all).
KEYLESS = {"CLIENT", "WAIT", "TIME", "PING", "SCRIPT", "INFO", "CLUSTER", "ASKING", "MULTI", "EXEC"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _keys(command: Sequence[Any]) -> tuple[str, list[str]] | None:
    """A command's name (a script's) and the keys it names; None for one we do not audit."""
    if not command or not isinstance(command[0], (str, bytes)):
        return None  # a Cluster wire's command addressed to a node (CLIENT UNBLOCK)
    verb = _text(command[0]).upper()
    if verb == "EVALSHA":
        count = int(command[2])
        return NAMES.get(_text(command[1]), "(unknown script)"), list(command[3 : 3 + count])
    if verb in MULTI_KEY:
        return verb, list(command[1:-1] if verb == "BLPOP" else command[1:])
    if verb in KEYLESS or len(command) < 2:
        return None
    return verb, [command[1]]


NAMES = {
    hashlib.sha1(source.encode()).hexdigest(): name for name, source in scripts.SOURCES.items()
}


class Audit:
    """Calls seen, per name: [calls, calls spanning slots, the keys of one such call]."""

    def __init__(self) -> None:
        self.seen: dict[str, list[Any]] = defaultdict(lambda: [0, 0, ""])

    def record(self, name: str, keys: Sequence[Any]) -> None:
        names = [_text(key) for key in keys]
        entry = self.seen[name]
        entry[0] += 1
        if len({key_slot(key.encode()) for key in names}) > 1:
            entry[1] += 1
            entry[2] = entry[2] or " ".join(names)[:300]

    def command(self, command: Sequence[Any]) -> None:
        found = _keys(command)
        if found is not None and (found[0] in NAMES.values() or found[0] in MULTI_KEY
                                  or found[0] == "(unknown script)"):  # fmt: skip
            self.record(*found)

    def transaction(self, commands: Sequence[Sequence[Any]]) -> None:
        keys = [key for command in commands if (found := _keys(command)) for key in found[1]]
        self.record("MULTI", keys)

    def spanning(self) -> dict[str, tuple[int, int, str]]:
        """The names of the calls that spanned slots: (calls, spanning, example)."""
        return {name: (c, s, e) for name, (c, s, e) in self.seen.items() if s}

    def table(self) -> list[str]:
        return [f"  {name:14} {s:5} of {c:5}  {e}" for name, (c, s, e) in sorted(self.seen.items())]


def _patch(owner: Any, attribute: str, make: Any) -> Any:
    original = getattr(owner, attribute)
    setattr(owner, attribute, make(original))
    return original


@contextmanager
def recording() -> Iterator[Audit]:
    """Record every call sent to Redis (see the module) while the block runs."""
    audit = Audit()

    def one(original: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            audit.command(args)
            return original(self, *args, **kwargs)

        return wrapper

    def each(original: Any) -> Any:
        def wrapper(self: Any, commands: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
            for command in commands:
                audit.command(command)
            return original(self, commands, *args, **kwargs)

        return wrapper

    def execute(original: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.transaction and self.command_stack:
                audit.transaction([c.args for c in self.command_stack])
            return original(self, *args, **kwargs)

        return wrapper

    patched = [
        (redis.Redis, "execute_command", _patch(redis.Redis, "execute_command", one)),
        (redis.client.Pipeline, "pipeline_execute_command",
         _patch(redis.client.Pipeline, "pipeline_execute_command", one)),
        (redis.client.Pipeline, "execute", _patch(redis.client.Pipeline, "execute", execute)),
        (connection.ScriptCalls, "_round_trip",
         _patch(connection.ScriptCalls, "_round_trip", each)),
    ]  # fmt: skip
    try:
        yield audit
    finally:
        for owner, attribute, original in patched:
            setattr(owner, attribute, original)


_SESSION: list[Any] = []


def pytest_configure(config: pytest.Config) -> None:
    context = recording()
    _SESSION[:] = [context, context.__enter__()]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    audit: Audit = _SESSION[1]
    terminalreporter.write_line("\ncalls that name keys in more than one Cluster slot:")
    for line in audit.table():
        terminalreporter.write_line(line)
    unseen = sorted(set(scripts.SOURCES) - set(audit.seen))
    terminalreporter.write_line(f"  scripts not called by these tests: {', '.join(unseen)}")
