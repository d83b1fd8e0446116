"""What `python -m bench` runs the systems with: venvs, workers, drivers, /proc readings.

Every wait here has a deadline, and every process started here is stopped by its owner: a worker
or driver runs in a session of its own, so killing its process group takes its children too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from bench.peers import ROOT, Context

PAGE = os.sysconf("SC_PAGE_SIZE")


class BenchError(Exception):
    """A system did not do what the benchmark needs (the message says which and what)."""


def wait_until(what: str, done: Callable[[], bool], timeout: float, poll: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not within {timeout:g}s")
        time.sleep(poll)


# Virtual environments of the peers: .bench-venv/<system>/, one each, so that each peer gets its
# own newest release whatever the others pin.


def _uv() -> str | None:
    if found := shutil.which("uv"):
        return found
    if importlib.util.find_spec("uv") is not None:
        from uv import find_uv_bin  # type: ignore[import-not-found]

        return str(find_uv_bin())
    return None


def ensure_venv(base: Path, system: str, requirements: tuple[str, ...], log: IO[str]) -> str:
    """Create (or reuse) base/system with requirements from PyPI; return its python."""
    venv = base / system
    python = venv / "bin" / "python"
    marker = venv / "bench-requirements.txt"
    want = f"# Python {sys.version.split()[0]} from {sys.base_prefix}\n" + "\n".join(requirements)
    if python.exists() and marker.exists() and marker.read_text() == want:
        return str(python)
    shutil.rmtree(venv, ignore_errors=True)
    print(f"creating {venv} with {' '.join(requirements)}", file=log, flush=True)
    if uv := _uv():
        commands = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", str(python), *requirements],
        ]
    else:
        commands = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", *requirements],
        ]
    for command in commands:
        subprocess.run(command, check=True, timeout=900, env={**os.environ, "VIRTUAL_ENV": ""})
    marker.write_text(want)
    return str(python)


# /proc


def _processes() -> Iterator[tuple[int, int, int, int]]:
    """(pid, ppid, process group, session) of every live process (zombies left out)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z":
            yield int(entry.name), int(fields[1]), int(fields[2]), int(fields[3])


def tree(root: int) -> set[int]:
    """root, its descendants, and whatever else is in its process group or session (all alive).

    A worker is started as the leader of a new session; RQ's work horse moves to a process
    group of its own (setpgrp), but stays in the session, and outlives its parent's SIGKILL.
    """
    procs = list(_processes())
    children: dict[int, list[int]] = {}
    for pid, ppid, _, _ in procs:
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, _, group, session in procs if root in (pid, group, session)}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def rss(pids: set[int]) -> int:
    """Sum of the resident set sizes of pids, in bytes (shared pages count once per process)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            pass
    return total


def pss(pids: set[int]) -> int:
    """Sum of the proportional set sizes of pids, in bytes (each shared page split among its
    sharers)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine since boot, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return sum(values) - values[3] - values[4], sum(values)  # less idle and iowait


def own_jiffies() -> int:
    """CPU time of this process and every process it started (reaped ones included)."""
    total = 0
    for pid in tree(os.getpid()) | {os.getpid()}:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total


class Others:
    """The share of the machine's CPU that processes other than ours use (0-1) over a span."""

    def __init__(self) -> None:
        self.busy, self.total = cpu_jiffies()
        self.own = own_jiffies()

    def share(self) -> float:
        busy, total = cpu_jiffies()
        own = own_jiffies()
        if total <= self.total:
            return 0.0
        return max(0.0, (busy - self.busy) - (own - self.own)) / (total - self.total)


def settle(limit: float, patience: float, log: IO[str]) -> float:
    """Wait (up to patience seconds) until other processes use under limit of the CPU over a
    second; return the last share measured."""
    deadline = time.monotonic() + patience
    while True:
        others = Others()
        time.sleep(1.0)
        share = others.share()
        if share < limit or time.monotonic() > deadline:
            return share
        print(f"  the machine is busy ({share:.0%} of its CPU used by others): waiting", file=log)


def keep_priority(pid: int) -> None:
    """Give the session that pid leads this process's nice value.

    With the kernel's autogroup scheduling on (/proc/sys/kernel/sched_autogroup_enabled), nice
    ranks processes only within their session, and each session competes at its autogroup's
    nice (0): a worker started in a session of its own would lose a `nice -n -10 python -m
    bench`'s priority. Writing the value to /proc/<pid>/autogroup keeps it (best effort: it
    needs the privilege a negative nice needed).
    """
    niceness = os.nice(0)
    if niceness:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/autogroup").write_text(str(niceness))


def kill_tree(root: int) -> None:
    """SIGKILL root's whole tree (see tree()), all at once."""
    for pid in tree(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# Processes


class Worker:
    """One worker process of a system, with its output in a log file and its peak tree RSS."""

    def __init__(self, ctx: Context, log: Path, sample_rss: bool = True) -> None:
        self.ctx, self.log = ctx, log
        command = ctx.module.worker(ctx)
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=ctx.full_env(), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        keep_priority(self.process.pid)
        self.started = time.monotonic()
        self.peak_rss = self.peak_pss = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        if sample_rss:
            self._sampler.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _sample(self) -> None:
        n = 0
        while not self._stop.wait(0.1):
            pids = tree(self.pid)
            self.peak_rss = max(self.peak_rss, rss(pids))
            if n % 5 == 0:  # reading smaps_rollup walks the page tables: less often
                self.peak_pss = max(self.peak_pss, pss(pids))
            n += 1

    def check(self) -> None:
        if self.process.poll() is not None:
            raise BenchError(
                f"{self.ctx.label}: the worker exited with code {self.process.returncode}; "
                f"end of {self.log}:\n  " + "\n  ".join(self.tail())
            )

    def tail(self, lines: int = 15) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()[-lines:]

    def _end_sampler(self) -> None:
        self._stop.set()
        if self._sampler.is_alive():
            self._sampler.join(timeout=5)

    def _reap_tree(self) -> None:
        """SIGKILL whatever is left of the worker's tree; wait until all of it is gone."""

        def gone() -> bool:
            kill_tree(self.pid)  # again: a process may have forked meanwhile
            return self.process.poll() is not None and not tree(self.pid)

        wait_until(f"{self.ctx.label}: worker processes gone", gone, timeout=20, poll=0.05)

    def kill9(self) -> None:
        """kill -9 the whole worker: its process group, its session and its descendants."""
        self._end_sampler()
        self._reap_tree()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL what is left after timeout; the exit code (None: killed)."""
        self._end_sampler()
        code: int | None = None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.process.wait(timeout=timeout)
        else:
            code = self.process.returncode
        self._reap_tree()
        return code


class Driver:
    """A system's producer (bench.peers.driver) in the system's venv, asked over a pipe."""

    def __init__(self, ctx: Context, log: Path) -> None:
        self.ctx = ctx
        with log.open("ab") as err:
            self.process = subprocess.Popen(
                [ctx.python, "-m", "bench.peers.driver", ctx.system], cwd=ROOT,
                env=ctx.full_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, start_new_session=True,
            )  # fmt: skip
        keep_priority(self.process.pid)
        self.log = log
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._next(120.0, "start")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _next(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(
                f"{self.ctx.label} driver: no answer to {what} in {timeout:g}s"
            ) from None
        if line is None:
            tail = self.log.read_text(errors="replace").splitlines()[-15:]
            raise BenchError(f"{self.ctx.label} driver died during {what}:\n  " + "\n  ".join(tail))
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, timeout: float, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._next(timeout, request["op"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def fill(ctx: Context, jobs: int, timeout: float = 300.0) -> None:
    """Put `jobs` no-op jobs in the system's queue through its own driver (its venv, its
    client): the bulk API where there is one, else one enqueue call each."""
    driver = Driver(ctx, Path(tempfile.gettempdir()) / f"{ctx.tag}-driver.log")
    try:
        bulk = ctx.module.enqueue_many is not None
        driver.ask(timeout, op="enqueue_many" if bulk else "enqueue", n=jobs - 1)  # + warm-up
    finally:
        driver.close()
