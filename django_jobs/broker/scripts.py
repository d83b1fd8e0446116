"""The Lua scripts of the broker, read once from `lua/` and registered per Redis client.

Registered scripts run by SHA (EVALSHA) and are loaded again transparently when Redis has
forgotten them (after a restart or SCRIPT FLUSH): redis-py's `Script` does that for us.
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


def register(client: redis.Redis) -> dict[str, Script]:
    """Return every script bound to client, keyed by name."""
    return {name: client.register_script(source) for name, source in SOURCES.items()}
