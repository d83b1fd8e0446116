"""What every peer's tasks do, in the peer's worker processes (each `<name>_tasks.py` wraps these).

- `noop`: append one byte to $BENCH_DONE_FILE (one O_APPEND write, about a microsecond, no
  Redis): the harness counts finished jobs by the file's size, at no cost to Redis;
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

_lock = threading.Lock()
_pid = 0
_fd = -1
_client: redis.Redis | None = None


def _for_this_process() -> None:
    """Open the done file and the Redis client anew after a fork (they are per process)."""
    global _pid, _fd, _client
    if _pid == os.getpid():
        return
    with _lock:  # Dramatiq's threads get here at once
        if _pid != os.getpid():
            _fd = os.open(os.environ["BENCH_DONE_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            _client = redis.Redis.from_url(URL)
            _pid = os.getpid()


def client() -> redis.Redis:
    _for_this_process()
    assert _client is not None
    return _client


def noop() -> None:
    _for_this_process()
    os.write(_fd, b".")


def stamp(sent: float) -> None:
    client().rpush(key(SYSTEM, "latency"), time.time() - sent)


def sleeper_started() -> None:
    client().rpush(key(SYSTEM, "started"), os.getpid())


def sleeper() -> None:
    sleeper_started()
    time.sleep(SLEEP)
