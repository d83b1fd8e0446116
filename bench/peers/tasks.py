"""What every peer's tasks do, in the peer's worker processes (each `<name>_tasks.py` wraps these).

- `noop`: one Redis command, as a real job's one piece of I/O: INCR `bench:<system>:done` on
  database 1 of the bench's Redis (the queues are on database 0); the harness counts finished
  jobs by it (django-jobs' no-op, testproject's probes.Touch, does the same);
- `stamp`: push `time.time() - sent` to `bench:<system>:latency`;
- `sleeper`: push the pid to `bench:<system>:started`, then sleep 60 s.
"""

from __future__ import annotations

import os
import threading
import time

import redis

from bench.peers import key

SYSTEM = os.environ["BENCH_SYSTEM"]
URL = os.environ["BENCH_REDIS_URL"]
SLEEP = 60.0

#: The database the no-op's INCR goes to (the queues are on database 0).
DONE_DB = 1

_lock = threading.Lock()
_pid = 0
_client: redis.Redis | None = None
_done: redis.Redis | None = None


def _for_this_process() -> None:
    """Open the Redis clients anew after a fork (they are per process; a client's pool is
    thread-safe, so Dramatiq's threads share one)."""
    global _pid, _client, _done
    if _pid == os.getpid():
        return
    with _lock:  # Dramatiq's threads get here at once
        if _pid != os.getpid():
            _client = redis.Redis.from_url(URL)
            _done = redis.Redis.from_url(URL, db=DONE_DB)
            _pid = os.getpid()


def client() -> redis.Redis:
    _for_this_process()
    assert _client is not None
    return _client


def noop() -> None:
    _for_this_process()
    assert _done is not None
    _done.incr(key(SYSTEM, "done"))


def stamp(sent: float) -> None:
    client().rpush(key(SYSTEM, "latency"), time.time() - sent)


def sleeper_started() -> None:
    client().rpush(key(SYSTEM, "started"), os.getpid())


def sleeper() -> None:
    sleeper_started()
    time.sleep(SLEEP)
