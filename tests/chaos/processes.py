"""Processes the battery deals with: Redis servers it starts, and what /proc says about others.

Processes are looked at by pid and through /proc only (no psutil): a worker's processes are
found by a marker in their environment, which every child inherits from its supervisor, so a
child that outlived its supervisor is still found, whoever its parent is now.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import redis

from tests.ports import free_port as free_port

T = TypeVar("T")


class ChaosError(Exception):
    """An expectation of a scenario did not hold (the message says which)."""


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll predicate until it returns something truthy; raise ChaosError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ChaosError(f"{what}: not within {timeout:g}s")
        time.sleep(interval)


class RedisServer:
    """A redis-server the battery started on a free port: the only kind it stops or freezes."""

    def __init__(
        self, directory: Path, *, appendonly: bool = False, extra: tuple[str, ...] = ()
    ) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise ChaosError("redis-server is not installed (apt-get install redis-server)")
        self.executable = executable
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        #: More redis-server arguments (`--appendfsync always`, say).
        self.extra = extra
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes" if self.appendonly else "no"]
        args += ["--dir", str(self.directory), *self.extra]
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ChaosError(f"redis-server exited with {self.process.returncode}")
            try:
                return bool(client.ping())
            except (redis.ConnectionError, redis.BusyLoadingError):
                return False

        wait_until(answers, 20, f"redis-server on port {self.port} answering")
        client.close()
        return self

    def stop(self) -> None:
        """Stop it cleanly (SIGCONT first, in case it is frozen): with AOF on, nothing is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None

    def crash(self) -> None:
        """kill -9 it: what the AOF had not synced yet is gone."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


def read_rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (a zombie runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the command name, which is in parentheses and may hold spaces.
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def parent(pid: int) -> int:
    """The parent pid of a process (0 if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return 0


def marked(**environment: str) -> set[int]:
    """The live processes whose environment holds every given variable with its value."""
    wanted = [f"{name}={value}".encode() for name, value in environment.items()]
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if all(w in variables for w in wanted) and alive(int(entry.name)):
            found.add(int(entry.name))
    return found
