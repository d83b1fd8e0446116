"""`runworker` in a subprocess, pointed at the test's Redis namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RedisNamespace, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: Short timings so that recovery happens within a test's patience.
FAST = {"LEASE": 3, "HEARTBEAT_INTERVAL": 1, "RECOVERER_INTERVAL": 1, "TIMEOUT_GRACE": 1}


class Worker:
    """One `manage.py runworker` process; output goes to a file the test can show."""

    def __init__(self, url: str, namespace: str, log: Path, database_url: str = "") -> None:
        self.url = url
        self.namespace = namespace
        self.log = log
        #: The worker's database (default: a SQLite file of its own beside the log).
        self.database_url = database_url or f"sqlite:///{log.parent / 'worker.sqlite3'}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, **jobs: Any) -> Worker:
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(
            REDIS_URL=self.url,
            JOBS_NAMESPACE=self.namespace,
            JOBS_EXTRA=json.dumps({**FAST, **jobs}),
            DATABASE_URL=self.database_url,
            PYTHONUNBUFFERED="1",
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float = 30) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit within {timeout}s:\n{self.output()}")

    def children(self) -> list[int]:
        """Pids of the worker's child processes."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            for pid in self.children():
                os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def worker(redis_ns: RedisNamespace, tmp_path: Path) -> Iterator[Worker]:
    """A runworker for this test's namespace (start it with .start(*args, **JOBS))."""
    process = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "worker.log")
    yield process
    process.kill()


def probe(ns: RedisNamespace, name: str) -> str:
    return f"{ns.namespace}:probe:{name}"


def done(ns: RedisNamespace) -> list[str]:
    return [item.decode() for item in ns.client.lrange(probe(ns, "done"), 0, -1)]


def started(ns: RedisNamespace, tag: str, timeout: float = 20) -> int:
    """Wait until the probe job `tag` has started; return the pid it runs in."""
    value = wait_until(lambda: ns.client.hget(probe(ns, "started"), tag), timeout=timeout)
    return int(value.decode().split(":")[0])
