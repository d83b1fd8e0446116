"""The producer side of one system, run by the harness inside the system's venv.

    <venv>/bin/python -m bench.peers.driver <system>       (environment: Context.full_env())

It reads one JSON request per line on stdin and answers each with one JSON line on stdout:

- {"op": "enqueue", "n": N}: one warm-up job first (it connects, loads scripts, declares
  queues), then N no-op jobs, timed, in BLOCKS blocks; after each block as many bare redis-py
  `LPUSH` calls of a FLOOR_BYTES value to a scratch key, one call at a time, timed apart (the
  round-trip floor, measured beside the enqueue in this venv's redis-py, so that a drifting
  machine moves both); answers the seconds of each, the jobs now queued (N + 1) and the Redis
  commands the N jobs cost (`INFO commandstats` deltas, the LPUSHes left out);
- {"op": "enqueue_many", "n": N}: the same through the bulk API, without the floor;
- {"op": "stamps", "n": M, "spacing": S}: one warm-up stamp, waited for and dropped, then M stamp
  jobs S seconds apart;
- {"op": "sleeper"}: one sleeper job;
- {"op": "versions"}: the versions of the system's distributions, redis-py and Python.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib.metadata import version
from typing import Any

import redis

from bench.common import calls_since, commandstats
from bench.peers import Context, get, load

DEADLINE = 60.0
BLOCKS = 10
FLOOR_BYTES = 100  # about a peer's message; ours is about 200 bytes of JSON
FLOOR_KEY = "bench:floor"


def timed(probe: redis.Redis, run: Any, n: int) -> dict[str, Any]:
    run(1)  # warm-up
    before = commandstats(probe)
    start = time.perf_counter()
    run(n)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "jobs": n + 1, "calls": calls_since(probe, before)}


def timed_with_floor(probe: redis.Redis, url: str, run: Any, n: int) -> dict[str, Any]:
    """timed(), in blocks, each followed by as many bare LPUSH calls (see the docstring)."""
    floor = redis.Redis.from_url(url)
    value = b"x" * FLOOR_BYTES
    run(1)
    floor.lpush(FLOOR_KEY, value)  # warm-up: connected
    sizes = [n // BLOCKS + (1 if i < n % BLOCKS else 0) for i in range(BLOCKS)]
    seconds = floor_seconds = 0.0
    before = commandstats(probe)
    for size in sizes:
        start = time.perf_counter()
        run(size)
        seconds += time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(size):
            floor.lpush(FLOOR_KEY, value)
        floor_seconds += time.perf_counter() - start
    calls = calls_since(probe, before) - n
    floor.delete(FLOOR_KEY)
    return {"seconds": seconds, "floor_seconds": floor_seconds, "jobs": n + 1, "calls": calls}


def stamps(module: Any, ctx: Context, probe: redis.Redis, n: int, spacing: float) -> None:
    latency = get(ctx, "latency_key")(ctx)
    module.stamp(time.time())  # warm-up: the connection, and a worker that answers
    deadline = time.monotonic() + DEADLINE
    while not probe.llen(latency):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the warm-up stamp did not run within {DEADLINE:g}s")
        time.sleep(0.005)
    probe.delete(latency)
    first = time.monotonic()
    for i in range(n):
        module.stamp(time.time())
        time.sleep(max(0.0, first + (i + 1) * spacing - time.monotonic()))


def main() -> None:
    import os

    system = sys.argv[1]
    module = load(system)
    if hasattr(module, "setup"):
        module.setup()
    url = os.environ["BENCH_REDIS_URL"]
    ctx = Context(system, system, url, sys.executable, system, dict(os.environ))
    probe = redis.Redis.from_url(url)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        op, answer = request["op"], {}
        if op == "enqueue":
            answer = timed_with_floor(probe, url, module.enqueue, request["n"])
        elif op == "enqueue_many":
            answer = timed(probe, module.enqueue_many, request["n"])
        elif op == "stamps":
            stamps(module, ctx, probe, request["n"], request["spacing"])
        elif op == "sleeper":
            module.sleeper()
        elif op == "versions":
            dists = (*module.DISTS, "redis")
            answer = {d: version(d) for d in dists} | {"python": platform.python_version()}
        else:
            raise ValueError(f"unknown op {op!r}")
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
