"""What async jobs cost and save: one async child against prefork children at the same memory.

    .venv/bin/python -m bench.async_io [--quick] [--seconds S] [--json FILE]

The work is I/O-bound: each job waits 100 ms, as an HTTP call or an SMTP exchange does, and
uses almost no CPU: ``await asyncio.sleep(0.1)`` in an ``async def run`` (probes.NapAsync),
``time.sleep(0.1)`` in a ``def run`` for the prefork children (probes.NapSync). A private
redis-server; the jobs are queued before each worker starts, more than it can finish in the
window. Three measurements, one worker (`manage.py runworker`) each:

1. ``async``: ``--concurrency 1 --async-concurrency 100``, one child running up to 100 jobs at
   once: jobs/s over S seconds from its first finished job, and the peak memory of its process
   tree (PSS every 0.5 s: each page shared between the supervisor and its children counted
   once in all; RSS every 0.1 s) meanwhile;
2. the prefork worker's memory as a line, ``PSS = base + per child x C``, through two short runs
   at ``--concurrency 1`` and ``--concurrency 4``;
3. ``prefork``: the concurrency whose PSS on that line is the async worker's (at least 1),
   measured as in 1.

Then the ratios (async over prefork, same memory), and what the prefork worker would need for
the async worker's throughput: jobs/s x 0.1 s children, their memory read off the line.

S: 10 s (--quick: 2 s, fits 1 s). `python -m bench` runs it after its table (not --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from bench.common import delete_namespace, private_redis
from bench.harness import pss, rss, tree

ROOT = Path(__file__).resolve().parents[1]
#: Seconds each job waits.
NAP = 0.1
#: Tasks the async child runs at once.
SLOTS = 100
#: The prefork concurrencies the memory line is drawn through.
FIT = (1, 4)


@dataclass(frozen=True)
class Run:
    name: str
    concurrency: int
    async_concurrency: int
    jobs_per_s: float
    pss: int  # bytes, peak
    rss: int  # bytes, peak


class Bench:
    def __init__(self, url: str, tmp: Path) -> None:
        self.namespace = f"bench-async-{uuid.uuid4().hex[:8]}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "REDIS_URL": url,
            "JOBS_NAMESPACE": self.namespace,
            "JOBS_LOG_LEVEL": "WARNING",
            "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
        }
        os.environ.update(self.env)  # this process enqueues: the same settings
        import django

        django.setup()
        self.client = redis.Redis.from_url(url)

    def napped(self) -> int:
        return int(self.client.get(f"{self.namespace}:probe:napped") or 0)

    def measure(self, name: str, concurrency: int, slots: int, seconds: float) -> Run:
        from testproject.probes.async_jobs import NapAsync, NapSync, Work

        job = NapAsync if slots > 1 else NapSync
        # More than the worker can finish in the window (and its start), so it never runs dry.
        count = int(concurrency * slots / NAP * (seconds + 5))
        for start in range(0, count, 1000):
            job.enqueue_many([Work(str(n), NAP) for n in range(start, min(count, start + 1000))])
        command = [sys.executable, str(ROOT / "manage.py"), "runworker", "--queues", "default",
                   "--concurrency", str(concurrency),
                   "--async-concurrency", str(slots)]  # fmt: skip
        worker = subprocess.Popen(command, cwd=ROOT, env=self.env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not self.napped():
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name}: the worker finished no job (exit {worker.poll()})")
                time.sleep(0.01)
            begun, first = time.monotonic(), self.napped()
            peak_pss = peak_rss = 0
            next_pss = begun
            while (now := time.monotonic()) < begun + seconds:
                pids = tree(worker.pid)
                peak_rss = max(peak_rss, rss(pids))
                if now >= next_pss:
                    peak_pss, next_pss = max(peak_pss, pss(pids)), now + 0.5
                time.sleep(0.1)
            rate = (self.napped() - first) / (time.monotonic() - begun)
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
            delete_namespace(self.client, self.namespace)
        return Run(name, concurrency, slots, rate, peak_pss, peak_rss)


def mib(size: float) -> str:
    return f"{size / 2**20:.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s windows")
    parser.add_argument("--seconds", type=float, help="the measuring window (10; --quick: 2)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    seconds = args.seconds or (2.0 if args.quick else 10.0)
    fit_seconds = 1.0 if args.quick else 3.0
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        bench = Bench(url, Path(tmp))
        aio = bench.measure("async", 1, SLOTS, seconds)
        low, high = (bench.measure(f"fit-{c}", c, 1, fit_seconds) for c in FIT)
        per_child = (high.pss - low.pss) / (FIT[1] - FIT[0])
        base = low.pss - per_child * FIT[0]
        matched = max(1, round((aio.pss - base) / per_child))
        fork = bench.measure("prefork", matched, 1, seconds)
    needed = aio.jobs_per_s * NAP
    print(f"\nAsync jobs against prefork children, {NAP * 1000:.0f} ms I/O-bound jobs, "
          f"{seconds:g} s windows")  # fmt: skip
    print(f"{'worker':<34} {'jobs/s':>8} {'PSS':>9} {'RSS':>9}")
    for run, how in ((aio, f"1 child x {SLOTS} async"), (fork, f"{matched} prefork children")):
        print(f"{how:<34} {run.jobs_per_s:>8.0f} {mib(run.pss):>9} {mib(run.rss):>9}")
    print(f"\nprefork memory: {mib(base)} + {mib(per_child)} per child (PSS, through "
          f"--concurrency {FIT[0]} and {FIT[1]})")  # fmt: skip
    print(f"at the same memory: async/prefork throughput {aio.jobs_per_s / fork.jobs_per_s:.1f}x, "
          f"memory {aio.pss / fork.pss:.2f}x")  # fmt: skip
    print(f"prefork at the async worker's throughput: {needed:.0f} children, about "
          f"{mib(base + per_child * needed)} PSS, {(base + per_child * needed) / aio.pss:.1f}x "
          "the async worker's")  # fmt: skip
    if args.json:
        figures: dict[str, Any] = {"async": asdict(aio), "prefork": asdict(fork),
                                   "fit": [asdict(low), asdict(high)], "base": base,
                                   "per_child": per_child, "seconds": seconds}  # fmt: skip
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
