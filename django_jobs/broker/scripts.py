"""The Lua scripts of the broker, read once from `lua/` and registered per Redis client.

Registered scripts run by SHA (EVALSHA) and are loaded again transparently when Redis has
forgotten them (after a restart or SCRIPT FLUSH): redis-py's `Script` does that for us.

Each script's file opens with a Redis 7 shebang line, `#!lua` for a script that writes: Redis
then refuses the whole script under maxmemory (OOM) before it runs, instead of failing at its
first write with earlier writes applied. Three say `flags=allow-oom`: `extend_lease` only
moves the scores of existing members, and a running task's lease must outlive an OOM window,
or the task would be recovered and run a second time; `janitor` and `delete` only delete, and
they are how memory is freed under maxmemory with noeviction (without them only redis-cli
could). The shebang is followed by
the helpers of `_prelude.lua` it calls (each call of a script defines them anew, so a script
gets only those), then by the script itself. What more than one script does is written once
there, with its contract: the stale-epoch guard of the outcome scripts (`held`, `claim`), the
wake-up token push (`wake`), the crash-count rule of recover and requeue (`crashed`), a new
task's due time (`due`), Redis' clock (`clock`), the key type checks (`wrong_type`, `fields`,
`take`, `range`), whether a flow run has ended (`ended`).

`ack_dequeue` is composed from two of them, so that a worker acks a task and fetches the next
one in a single script call: the hot path of draining a queue. Its shebang is its first line
only; both parts read one clock (`_ONE_CLOCK`).
"""

from __future__ import annotations

import re
from importlib import resources

import redis
from redis.commands.core import Script


def _read() -> dict[str, str]:
    return {
        entry.name.removesuffix(".lua"): entry.read_text(encoding="utf-8")
        for entry in resources.files("django_jobs.broker").joinpath("lua").iterdir()
        if entry.name.endswith(".lua")
    }


_FILES = _read()
#: The helpers scripts can call, by name, in the order they are defined in `_prelude.lua`: each
#: `local function` with the comment above it.
HELPERS: dict[str, str] = {
    match["name"]: match[0]
    for match in re.finditer(
        r"(?:--[^\n]*\n)*local function (?P<name>\w+)\(.*?\nend\n", _FILES.pop("_prelude"), re.S
    )
}


def _prelude(body: str) -> str:
    """The helpers a script body calls, with the helpers they call, in their defined order."""
    needed: set[str] = set()
    todo = [name for name in HELPERS if re.search(rf"\b{name}\(", body)]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += [other for other in HELPERS if re.search(rf"\b{other}\(", HELPERS[name])]
    return "".join(text for name, text in HELPERS.items() if name in needed)


def _split(source: str) -> tuple[str, str]:
    """A script file's shebang line and the rest."""
    shebang, _, body = source.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"a broker script must open with a '#!lua' shebang line: {shebang!r}")
    return shebang, body


#: Script name (the broker method that runs it) -> its shebang line and body.
_PARTS = {name: _split(source) for name, source in _FILES.items()}
#: Script name -> Lua source as sent to Redis.
SOURCES: dict[str, str] = {
    name: f"{shebang}\n{_prelude(body)}{body}" for name, (shebang, body) in _PARTS.items()
}


def _function(name: str) -> str:
    """A script's body as a local Lua function of (KEYS, ARGV) returning what it returns."""
    return f"local function {name}(KEYS, ARGV)\n{_PARTS[name][1]}\nend\n"


#: In a composed script, `clock` reads Redis' TIME once and gives that time to every later call:
#: the parts of one call are one moment (ack's completed_at is the next task's started_at), and
#: the hot path runs one TIME a job instead of two.
_ONE_CLOCK = """local read_clock, clock_at = clock, nil
clock = function()
  clock_at = clock_at or read_clock()
  return clock_at
end
"""

#: ack then dequeue in one call. KEYS: ack's 5 keys, then dequeue's; ARGV: ack's 4 args, then
#: dequeue's. Returns {ack's reply, dequeue's reply}, or ack's error reply (nothing changed).
SOURCES["ack_dequeue"] = (
    f"#!lua\n{_prelude(_PARTS['ack'][1] + _PARTS['dequeue'][1])}"
    + _ONE_CLOCK
    + _function("ack")
    + _function("dequeue")
    + "local acked = ack({unpack(KEYS, 1, 5)}, {unpack(ARGV, 1, 4)})\n"
    + "if type(acked) == 'table' and acked.err then\n  return acked\nend\n"
    + "return {acked, dequeue({unpack(KEYS, 6)}, {unpack(ARGV, 5)})}\n"
)


def register(client: redis.Redis) -> dict[str, Script]:
    """Return every script bound to client, keyed by name."""
    return {name: client.register_script(source) for name, source in SOURCES.items()}
