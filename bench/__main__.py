"""django-jobs beside Celery, RQ, Dramatiq, Huey and arq: one workload, one Redis, one table.

    python -m bench [--quick] [--runs R] [--systems ours,celery,...] [--json FILE]

The peers are installed from PyPI into .bench-venv/<peer>/ (git-ignored; rebuilt when their pins
in bench/peers/<peer>.py change), never into the project. Ours runs in this interpreter. One
private redis-server is started on a free port; its databases are flushed between systems.

The no-op job of every system does one Redis command, as a real job does some I/O: an INCR on
database 1 of that server (the queues are on database 0), which also counts finished jobs.

Each system runs in setups: at its defaults, as its own docs start its worker, and at each
matched concurrency (2, 4, 10 jobs at once; one equal to the defaults is not taken twice);
one worker process tree each, every log at WARNING (no line per task, for any system). Per
system, setup and run:

1. bulk enqueue (defaults only): N no-op jobs through the bulk API, where there is one (then
   the databases are flushed);
2. enqueue: N no-op jobs, one call each, from one process, in 10 blocks, each followed by as
   many bare redis-py LPUSH calls (the round-trip floor); each phase after one warm-up call;
3. drain: those jobs, by a worker started on the full queue: jobs/s from the first finished job
   to the last (polled every 5 ms), so the worker's start-up is left out; a drain still going
   after CAP seconds is measured up to then (marked *), and a fresh worker takes over for 4;
4. pickup: after 1 s idle, M stamp jobs enqueued 20 ms apart; each pushes time.time() minus the
   time.time() its producer read just before the enqueue call; p50/p95/p99 in ms;
5. SIGTERM. Peak RSS is the sum over the worker's process tree, sampled every 0.1 s from /proc
   during 3-4 (peak PSS every 0.5 s). Commands per job are `INFO commandstats` deltas
   (commands inside Lua scripts included): the enqueue's own, and the worker's from its start
   to the end of the drain, the job's own INCR and the harness's polls left out.

Each run takes the setups column by column (all defaults, then all at 2, ...), the systems in
RUN_ORDER (bench.peers) within each: django-jobs next to the fastest peers, RQ last.

Then, once, all systems at their defaults at the same time (their keys do not overlap):
kill -9. A job that sleeps 60 s is enqueued; once it started, the worker's whole process group
gets SIGKILL and a fresh worker starts; the time from the kill until the job starts again, or
"never" after the cap. django-jobs is measured with its default LEASE (30 s) and a short one.

Last, with ours among the systems, the outbox's cost (bench/outbox.py), what flows cost
(bench/flows.py) and, but for --quick, async jobs against prefork children at the same memory
(bench/async_io.py, about a minute). bench.memory, bench.profile and bench.capacity are run on
their own.

N=20000, M=200, 3 runs (medians), drain cap 15 s, kill cap 120 s; --quick: N=300, M=30, 1 run,
the defaults only, caps 8 s, and ours only with the short lease in the kill case. Ratios
compare each median with django-jobs' median of this run, in the same column.

The machine may be shared: the CPU time that processes other than the benchmark's use is
measured (/proc/stat less our own process tree) and printed per run, with the load average.
A full run waits (up to 3 min) for the others to use under 10% of the CPU before each setup,
and takes it again (twice at most) when they used over 25% during it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import redis

from bench.common import calls_since, commandstats, private_redis
from bench.harness import (
    BenchError,
    Driver,
    Others,
    Worker,
    ensure_venv,
    keep_priority,
    settle,
    wait_until,
)
from bench.peers import DONE_DB, MATCHED, ROOT, RUN_ORDER, SYSTEMS, Context, get, load, setups
from bench.report import Result, Setup, loadavg, report, revision

SPACING = 0.02
POLL = 0.005
SHORT_LEASE = {"LEASE": 5, "HEARTBEAT_INTERVAL": 1, "RECOVERER_INTERVAL": 1}
QUICK_LEASE = {"LEASE": 2, "HEARTBEAT_INTERVAL": 0.5, "RECOVERER_INTERVAL": 0.5}
ODD = re.compile(r"warn|error|traceback|exception|critical|fatal|killed", re.IGNORECASE)


@dataclass
class Sizes:
    jobs: int
    pickups: int
    runs: int
    cap: float
    idle: float
    #: Seconds to wait for a quiet machine before each setup's run, and how many times a run
    #: is taken again when other processes used more than BUSY of the CPU during it.
    patience: float
    retakes: int
    #: Seconds a drain is measured for at most (a slow system does not take minutes).
    drain_cap: float
    #: Whether the matched concurrencies run too (else the defaults only).
    matched: bool


FULL = Sizes(jobs=20_000, pickups=200, runs=3, cap=120.0, idle=1.0, patience=180, retakes=2,
             drain_cap=15.0, matched=True)  # fmt: skip
QUICK = Sizes(jobs=300, pickups=30, runs=1, cap=8.0, idle=0.5, patience=0, retakes=0,
              drain_cap=8.0, matched=False)  # fmt: skip
QUIET, BUSY = 0.10, 0.25


def say(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def odd_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if ODD.search(line)]


def drain(
    ctx: Context, counter: redis.Redis, worker: Worker, expected: int, cap: float
) -> tuple[float, int, int, bool]:
    """Poll until `expected` jobs finished, or `cap` s after the first did: (jobs/s from the
    first finished job, polls, jobs finished, whether all were)."""
    done, polls = get(ctx, "done"), 0
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + 900
    while True:
        finished, now = done(ctx, counter), time.perf_counter()
        polls += 1
        if first is None and finished:
            first = (now, finished)
        if finished >= expected or (first is not None and now - first[0] >= cap):
            break
        worker.check()
        if time.monotonic() > deadline:
            raise BenchError(f"{ctx.label}: drained {finished} of {expected} jobs in 900 s")
        time.sleep(POLL)
    assert first is not None
    start, at_start = first
    if now <= start:  # everything finished between two polls
        start, at_start = worker.started, 0
    return (finished - at_start) / (now - start), polls, finished, finished >= expected


def run_system(ctx: Context, bench: Bench, bulk_too: bool) -> Result:
    module, n, m, sizes, tmp = (
        ctx.module,
        bench.sizes.jobs,
        bench.sizes.pickups,
        bench.sizes,
        bench.tmp,
    )
    probe, counter = bench.probe, bench.counter
    bench.flush()
    others, load_at_start = Others(), loadavg()
    driver = Driver(ctx, tmp / f"{ctx.tag}-driver.log")
    try:
        versions = driver.ask(60, op="versions")
        if ctx.system == "ours":  # django_jobs/ may change between runs: say which one ran
            versions["commit"] = revision()
        bulk = None
        if bulk_too and module.enqueue_many is not None:
            answer = driver.ask(600, op="enqueue_many", n=n)
            bulk = n / answer["seconds"]
            bench.flush()
        answer = driver.ask(900, op="enqueue", n=n)
        enqueue, floor = n / answer["seconds"], n / answer["floor_seconds"]
        enqueue_cmds, expected = answer["calls"] / n, answer["jobs"]

        log = tmp / f"{ctx.tag}-worker.log"
        before = commandstats(probe)
        worker = Worker(ctx, log)
        peaks = [worker]
        try:
            rate, polls, finished, complete = drain(ctx, counter, worker, expected, sizes.drain_cap)
            # Less each poll's GET and each job's own INCR: what the system itself sends.
            worker_calls = calls_since(probe, before) - polls - finished
            if not complete:  # a fresh worker on an empty queue for the pickups
                worker.stop()
                bench.flush()
                worker = Worker(ctx, log)
                peaks.append(worker)
            time.sleep(sizes.idle)
            driver.ask(m * SPACING + 120, op="stamps", n=m, spacing=SPACING)
            latency = get(ctx, "latency_key")(ctx)

            def arrived() -> bool:
                worker.check()
                return int(probe.llen(latency)) >= m

            wait_until(f"{ctx.label}: {m} stamps", arrived, timeout=60)
            ms = sorted(float(v) * 1000 for v in probe.lrange(latency, 0, -1))
            q = statistics.quantiles(ms, n=100, method="inclusive")
        finally:
            code = worker.stop()
    finally:
        driver.close()
        bench.flush()
    return Result(
        ctx.system, ctx.concurrency, ctx.concurrency or module.default_concurrency(), enqueue,
        floor, enqueue_cmds, bulk, rate, complete, worker_calls / max(finished, 1),
        (q[49], q[94], q[98]), max(w.peak_rss for w in peaks), max(w.peak_pss for w in peaks),
        code, others.share(), load_at_start, odd_lines(log), versions,
    )  # fmt: skip


def kill9(ctx: Context, probe: redis.Redis, cap: float, tmp: Path) -> float | None:
    """Seconds from kill -9 of a worker running the sleeper until the sleeper starts again."""
    started = get(ctx, "started")
    stem = tmp / f"{ctx.tag}-kill9"
    driver = Driver(ctx, stem.with_suffix(".driver.log"))
    first = second = None
    try:
        first = Worker(ctx, stem.with_suffix(".1.log"), sample_rss=False)
        driver.ask(60, op="sleeper")

        def running() -> bool:
            assert first is not None
            first.check()
            return bool(started(ctx, probe) >= 1)

        wait_until(f"{ctx.label}: the sleeper starts", running, timeout=120, poll=0.02)
        first.kill9()
        killed = time.monotonic()
        second = Worker(ctx, stem.with_suffix(".2.log"), sample_rss=False)
        while time.monotonic() - killed < cap:
            if started(ctx, probe) >= 2:
                return time.monotonic() - killed
            second.check()
            time.sleep(0.02)
        return None
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.kill9()
        driver.close()


@dataclass
class Bench:
    """One invocation: the systems, their venvs, the private Redis and a scratch directory."""

    sizes: Sizes
    systems: list[str]
    pythons: dict[str, str]
    url: str
    tmp: Path

    def __post_init__(self) -> None:
        self.probe = redis.Redis.from_url(self.url)
        #: Database 1, where the no-ops count themselves.
        self.counter = redis.Redis.from_url(self.url, db=DONE_DB)

    def flush(self) -> None:
        self.probe.flushdb()
        self.counter.flushdb()

    def context(
        self, system: str, tag: str, jobs: dict[str, Any] | None = None, concurrency: Setup = None
    ) -> Context:
        module = load(system)
        ctx = Context(system, module.TITLE, self.url, self.pythons[system], tag,
                      concurrency=concurrency)  # fmt: skip
        if hasattr(module, "environment"):
            ctx.env = module.environment(
                self.url, self.tmp, f"bench-{uuid.uuid4().hex[:8]}", jobs or {}
            )
        return ctx

    def runs(self) -> dict[tuple[str, Setup], list[Result]]:
        columns: list[Setup] = [None, *MATCHED] if self.sizes.matched else [None]
        order = sorted(self.systems, key=RUN_ORDER.index)
        todo = [(c, s) for c in columns for s in order if c in setups(s)]
        runs: dict[tuple[str, Setup], list[Result]] = {(s, c): [] for c, s in todo}
        for run in range(1, self.sizes.runs + 1):
            for column, system in todo:
                for take in range(self.sizes.retakes + 1):
                    if self.sizes.patience:
                        settle(QUIET, self.sizes.patience, sys.stderr)
                    began = time.monotonic()
                    where = "defaults" if column is None else f"{column} at once"
                    say(f"run {run}/{self.sizes.runs}: {system}, {where} ...")
                    tag = f"run{run}-{system}-{column or 'default'}-{take}"
                    ctx = self.context(system, tag, concurrency=column)
                    r = run_system(ctx, self, bulk_too=column is None)
                    say(
                        f"  enqueue {r.enqueue:,.0f}/s (LPUSH {r.floor:,.0f}/s), bulk "
                        f"{r.bulk or 0:,.0f}/s, drain {r.drain:,.0f}/s"
                        f"{'' if r.drained_all else ' (capped)'}, pickup p99 "
                        f"{r.pickup_ms[2]:.1f} ms, RSS {r.rss / 2**20:.0f} MiB, exit "
                        f"{r.exit_code}; {time.monotonic() - began:.1f} s, others used "
                        f"{r.others:.0%} of the CPU, load {r.load}"
                    )
                    if r.others <= BUSY or take == self.sizes.retakes:
                        break
                    say(f"  (others used over {BUSY:.0%} of the CPU: taking this run again)")
                runs[(system, column)].append(r)
        return runs

    def kills(self, cases: dict[str, Context]) -> dict[str, float | str | None]:
        """The kill -9 case of every system at once, each in a thread."""
        say(f"kill -9, all systems at once (cap {self.sizes.cap:g} s) ...")
        kills: dict[str, float | str | None] = {}

        def one(name: str, ctx: Context) -> None:
            try:
                kills[name] = kill9(ctx, self.probe, self.sizes.cap, self.tmp)
            except Exception as exc:
                kills[name] = f"error: {exc}".splitlines()[0][:60]
                say(f"{name}: the kill -9 case failed: {exc}")

        threads = [threading.Thread(target=one, args=item) for item in cases.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=self.sizes.cap + 400)
        self.flush()
        return kills


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="the smoke run CI executes")
    parser.add_argument("--runs", type=int, help="runs to take medians of (3; --quick: 1)")
    parser.add_argument("--jobs", type=int, help="N, jobs per enqueue and drain (20000)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    parser.add_argument("--defaults-only", action="store_true", help="no matched concurrency")
    parser.add_argument("--no-kill", action="store_true", help="leave out the kill -9 case")
    parser.add_argument("--no-extras", action="store_true", help="leave out outbox and flows")
    parser.add_argument(
        "--patience", type=float, help="seconds to wait for a quiet machine before each setup (180)"
    )
    parser.add_argument(
        "--retakes", type=int, help="times a setup's run is taken again on a busy machine (2)"
    )
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--venvs", type=Path, default=ROOT / ".bench-venv", help="peer venvs")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    sizes = replace(sizes, jobs=args.jobs or sizes.jobs, runs=args.runs or sizes.runs)
    if args.patience is not None:
        sizes = replace(sizes, patience=args.patience)
    if args.retakes is not None:
        sizes = replace(sizes, retakes=args.retakes)
    if args.defaults_only:
        sizes = replace(sizes, matched=False)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    if not shutil.which("redis-server"):
        sys.exit("redis-server is not on PATH: the benchmark starts a private one")
    # SIGTERM (a CI timeout, kill) unwinds like an exception: every worker, driver and the
    # private redis-server are stopped by the finally blocks that started them.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    keep_priority(os.getpid())  # the private redis-server runs in this session
    began, load_before = time.monotonic(), loadavg()
    pythons = {
        s: ensure_venv(args.venvs, s, load(s).REQUIREMENTS, sys.stderr)
        if load(s).REQUIREMENTS
        else sys.executable
        for s in systems
    }
    lease = QUICK_LEASE if args.quick else SHORT_LEASE
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        bench = Bench(sizes, systems, pythons, url, Path(tmp))
        runs = bench.runs()
        kills: dict[str, float | str | None] = {}
        if not args.no_kill:
            cases = {s: bench.context(s, f"kill-{s}") for s in systems}
            if "ours" in systems:
                cases["ours-short"] = bench.context("ours", "kill-ours-short", lease)
                if args.quick:  # the default lease takes longer than the whole quick run
                    del cases["ours"]
            kills = bench.kills(cases)
        redis_version = bench.probe.info("server")["redis_version"]
    elapsed = time.monotonic() - began
    report(args, sizes, systems, runs, kills, lease, redis_version, elapsed,
           (load_before, loadavg()))  # fmt: skip
    if "ours" in systems and not args.no_extras:
        # The outbox's cost; what flows cost; async jobs against prefork (not quick: a minute).
        for extra in ("bench.outbox", "bench.flows", *([] if args.quick else ["bench.async_io"])):
            print()
            command = [sys.executable, "-m", extra, *(["--quick"] if args.quick else [])]
            subprocess.run(command, cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
