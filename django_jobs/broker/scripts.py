"""The Lua scripts of the broker, read once from `lua/` and registered per Redis client.

Registered scripts run by SHA (EVALSHA) and are loaded again transparently when Redis has
forgotten them (after a restart or SCRIPT FLUSH): redis-py's `Script` does that for us.

`ack_dequeue` is composed from two of them, so that a worker acks a task and fetches the next
one in a single script call: the hot path of draining a queue.
"""

from __future__ import annotations

from importlib import resources

import redis
from redis.commands.core import Script

#: Script name (the broker method that runs it) -> Lua source.
SOURCES: dict[str, str] = {
    entry.name.removesuffix(".lua"): entry.read_text(encoding="utf-8")
    for entry in resources.files("django_jobs.broker").joinpath("lua").iterdir()
    if entry.name.endswith(".lua")
}


def _function(name: str, source: str) -> str:
    """A script's source as a local Lua function of (KEYS, ARGV) returning what it returns."""
    return f"local function {name}(KEYS, ARGV)\n{source}\nend\n"


#: ack then dequeue in one call. KEYS: ack's 5 keys, then dequeue's; ARGV: ack's 4 args, then
#: dequeue's. Returns {ack's reply, dequeue's reply}.
SOURCES["ack_dequeue"] = (
    _function("ack", SOURCES["ack"])
    + _function("dequeue", SOURCES["dequeue"])
    + "return {ack({unpack(KEYS, 1, 5)}, {unpack(ARGV, 1, 4)}),\n"
    + "  dequeue({unpack(KEYS, 6)}, {unpack(ARGV, 5)})}\n"
)


def register(client: redis.Redis) -> dict[str, Script]:
    """Return every script bound to client, keyed by name."""
    return {name: client.register_script(source) for name, source in SOURCES.items()}
