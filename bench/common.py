"""What the benchmarks share: a private redis-server, command counts, cleanup, versions."""

from __future__ import annotations

import contextlib
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import redis

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def commandstats(probe: redis.Redis) -> dict[str, int]:
    """Calls per command since the server started (`INFO commandstats`)."""
    stats: dict[str, dict[str, Any]] = probe.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()}


def calls_since(probe: redis.Redis, before: dict[str, int]) -> int:
    """Commands run since the `before` commandstats, leaving out INFO (the probe's own)."""
    after = commandstats(probe)
    return sum(v - before.get(k, 0) for k, v in after.items() if k != "cmdstat_info")


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """Start a redis-server without persistence on a free port; yield its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tmp,
        ]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    redis.Redis.from_url(url, socket_connect_timeout=0.2).ping()
                    break
                except redis.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=10)


@contextlib.contextmanager
def bench_redis(url: str | None, private: bool | None) -> Iterator[tuple[str, str]]:
    """Yield (URL, description) of the Redis to measure.

    private None: a private redis-server when one is on PATH and no url is given.
    """
    if private is None:
        private = url is None and shutil.which("redis-server") is not None
    if private:
        with private_redis() as own:
            yield own, f"private redis-server at {own}"
    else:
        url = url or DEFAULT_URL
        yield url, f"shared Redis at {url} (other clients may skew the counts)"


def delete_namespace(client: redis.Redis, namespace: str) -> int:
    """Delete every key of namespace (and nothing else); return how many there were."""
    keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    return len(keys)


def versions(probe: redis.Redis) -> str:
    import django

    return (
        f"Python {platform.python_version()}, Django {django.get_version()}, "
        f"redis-py {redis.__version__}, Redis {probe.info('server')['redis_version']}"
    )
