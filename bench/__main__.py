"""django-jobs beside Celery, RQ, Dramatiq, Huey and arq: one workload, one Redis, one table.

    python -m bench [--quick] [--runs R] [--systems ours,celery,...] [--json FILE]

The peers are installed from PyPI into .bench-venv/<peer>/ (git-ignored; rebuilt when their pins
in bench/peers/<peer>.py change), never into the project. Ours runs in this interpreter. One
private redis-server is started on a free port; its database is flushed between systems.

Per system and run, one worker process at comparable concurrency (the table's notes say how
each runs), every log at WARNING (no line per task, for any system):

1. bulk enqueue: N no-op jobs through the bulk API, where there is one (then the db is flushed);
2. enqueue: N no-op jobs, one call each, from one process (each phase after one warm-up job);
3. drain: those jobs, by a worker started on the full queue: jobs/s from the first finished job
   to the last (polled every 5 ms), so the worker's start-up is left out;
4. pickup: after 1 s idle, M stamp jobs enqueued 20 ms apart; each pushes time.time() minus the
   time.time() its producer read just before the enqueue call; p50/p95/p99 in ms;
5. SIGTERM. Peak RSS is the sum over the worker's process tree, sampled every 0.1 s from /proc
   during 3-4 (peak PSS, every 0.5 s, is printed under the table). Commands per job are
   `INFO commandstats` deltas (commands inside Lua scripts included): the enqueue's own, and
   the worker's from its start to the end of the drain.

Each run measures the systems in RUN_ORDER (bench.peers): django-jobs next to the fastest
peers, RQ last; the table keeps SYSTEMS' order.

Then, once, all systems at the same time (their keys do not overlap): kill -9. A job that sleeps
60 s is enqueued; once it started, the worker's whole process group gets SIGKILL and a fresh
worker starts; the time from the kill until the job starts again, or "never" after the cap.
django-jobs is measured with its default LEASE (30 s) and with a short one.

Last, with ours among the systems, the outbox's cost (bench/outbox.py: enqueue latency and
throughput with and without it on SQLite and PostgreSQL, a relay draining 100,000 rows; --quick
5,000), and what flows cost (bench/flows.py: starts per second, Redis round trips of a
memoised replay, step overhead against a plain job, end-to-end time of a 3-step and a 10-step
flow on an idle worker).

N=20000, M=200, 3 runs (medians), cap 120 s; --quick: N=300, M=30, 1 run, cap 8 s, and ours
only with the short lease. Ratios compare each median with django-jobs' median of this run.

The machine may be shared: the CPU time that processes other than the benchmark's use is
measured (/proc/stat less our own process tree) and printed per run. A full run waits (up to
3 min) for the others to use under 10% of the CPU before each system's run, and takes a run
again (twice at most) when they used over 25% during it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import redis

from bench.common import calls_since, commandstats, private_redis
from bench.harness import BenchError, Driver, Others, Worker, ensure_venv, settle, wait_until
from bench.peers import ROOT, RUN_ORDER, SYSTEMS, Context, get, load

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
    #: Seconds to wait for a quiet machine before each system's run, and how many times a run
    #: is taken again when other processes used more than BUSY of the CPU during it.
    patience: float
    retakes: int


FULL = Sizes(jobs=20_000, pickups=200, runs=3, cap=120.0, idle=1.0, patience=180, retakes=2)
QUICK = Sizes(jobs=300, pickups=30, runs=1, cap=8.0, idle=0.5, patience=0, retakes=0)
QUIET, BUSY = 0.10, 0.25


@dataclass
class Result:
    """One system, one run."""

    enqueue: float  # jobs/s
    enqueue_cmds: float  # per job
    bulk: float | None
    drain: float
    worker_cmds: float
    pickup_ms: tuple[float, float, float]
    rss: int  # bytes
    pss: int  # bytes
    exit_code: int | None
    others: float  # share of the machine's CPU that other processes used meanwhile
    odd: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)


def say(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def odd_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if ODD.search(line)]


def drain(ctx: Context, probe: redis.Redis, worker: Worker, expected: int) -> tuple[float, int]:
    """Poll until `expected` jobs finished; jobs/s from the first finished job; the polls."""
    done, polls = get(ctx, "done"), 0
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + 900
    while True:
        finished, now = done(ctx, probe), time.perf_counter()
        polls += 1
        if first is None and finished:
            first = (now, finished)
        if finished >= expected:
            break
        worker.check()
        if time.monotonic() > deadline:
            raise BenchError(f"{ctx.label}: drained {finished} of {expected} jobs in 900 s")
        time.sleep(POLL)
    assert first is not None
    start, at_start = first
    if now <= start:  # everything finished between two polls
        start, at_start = worker.started, 0
    return (expected - at_start) / (now - start), polls


def run_system(ctx: Context, probe: redis.Redis, sizes: Sizes, tmp: Path) -> Result:
    module, n, m = ctx.module, sizes.jobs, sizes.pickups
    probe.flushdb()
    others = Others()
    driver = Driver(ctx, tmp / f"{ctx.done_file.stem}-driver.log")
    try:
        versions = driver.ask(60, op="versions")
        if ctx.system == "ours":  # django_jobs/ may change between runs: say which one ran
            versions["commit"] = revision()
        bulk = None
        if module.enqueue_many is not None:
            answer = driver.ask(600, op="enqueue_many", n=n)
            bulk = n / answer["seconds"]
            probe.flushdb()
        answer = driver.ask(900, op="enqueue", n=n)
        enqueue, enqueue_cmds, expected = n / answer["seconds"], answer["calls"] / n, answer["jobs"]

        log = tmp / f"{ctx.done_file.stem}-worker.log"
        before = commandstats(probe)
        worker = Worker(ctx, log)
        try:
            rate, polls = drain(ctx, probe, worker, expected)
            worker_calls = calls_since(probe, before) - polls * getattr(module, "DONE_COMMANDS", 0)
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
        probe.flushdb()
    return Result(
        enqueue, enqueue_cmds, bulk, rate, worker_calls / expected, (q[49], q[94], q[98]),
        worker.peak_rss, worker.peak_pss, code, others.share(), odd_lines(log), versions,
    )  # fmt: skip


def kill9(ctx: Context, probe: redis.Redis, cap: float, tmp: Path) -> float | None:
    """Seconds from kill -9 of a worker running the sleeper until the sleeper starts again."""
    started = get(ctx, "started")
    stem = tmp / f"{ctx.done_file.stem}-kill9"
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


def revision() -> str:
    """The commit of the checkout, and whether django_jobs/ differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()  # fmt: skip

    try:
        commit, dirty = (
            git("rev-parse", "--short", "HEAD"),
            git("status", "--porcelain", "django_jobs"),
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return commit + (" with uncommitted changes in django_jobs/" if dirty else "")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return {
        "cores": str(os.cpu_count()),
        "memory": f"{int(mem[1]) / 2**20:.1f} GiB" if mem else "?",
        "cpu": model[1].strip() if model else platform.processor() or "?",
        "kernel": f"{platform.system()} {platform.release()}",
    }


# The table


def fmt_kill(seconds: float | str | None, cap: float) -> str:
    if isinstance(seconds, str):
        return seconds
    return f"never (>{cap:g} s)" if seconds is None else f"{seconds:.1f} s"


def medians(results: list[Result]) -> dict[str, Any]:
    bulks = [r.bulk for r in results if r.bulk is not None]
    return {
        "enqueue": statistics.median(r.enqueue for r in results),
        "bulk": statistics.median(bulks) if bulks else None,
        "drain": statistics.median(r.drain for r in results),
        "pickup": [statistics.median(r.pickup_ms[i] for r in results) for i in range(3)],
        "rss": statistics.median(r.rss for r in results) / 2**20,
        "pss": statistics.median(r.pss for r in results) / 2**20,
        "enq_cmds": statistics.median(r.enqueue_cmds for r in results),
        "worker_cmds": statistics.median(r.worker_cmds for r in results),
    }


def table(
    labels: dict[str, str], med: dict[str, dict[str, Any]], kills: dict[str, str]
) -> list[str]:
    """One row per system; each figure of a peer with its ratio to django-jobs' (x)."""
    base = med.get("ours")

    def cell(system: str, text: str, value: float | None, ref: float | None) -> str:
        if system == "ours" or value is None or not ref:
            return text
        return f"{text} ({value / ref:.2f}x)"

    head = ("system", "enqueue jobs/s", "bulk jobs/s", "drain jobs/s", "pickup ms p50/p95/p99",
            "worker RSS MiB", "cmds/job enq+worker", "kill -9: runs again")  # fmt: skip
    rows = [head]
    for system, m in med.items():
        b = base or {}
        p50, p95, p99 = m["pickup"]
        cmds = m["enq_cmds"] + m["worker_cmds"]
        rows.append((
            labels[system],
            cell(system, f"{m['enqueue']:,.0f}", m["enqueue"], b.get("enqueue")),
            cell(system, f"{m['bulk']:,.0f}", m["bulk"], b.get("bulk")) if m["bulk"] else "—",
            cell(system, f"{m['drain']:,.0f}", m["drain"], b.get("drain")),
            cell(system, f"{p50:.1f}/{p95:.1f}/{p99:.1f}", p99, (b.get("pickup") or [0, 0, 0])[2]),
            cell(system, f"{m['rss']:.0f}", m["rss"], b.get("rss")),
            cell(system, f"{m['enq_cmds']:.1f}+{m['worker_cmds']:.1f}", cmds,
                 b and b["enq_cmds"] + b["worker_cmds"]),
            kills.get(system, "—"),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


@dataclass
class Bench:
    """One invocation: the systems, their venvs, the private Redis and a scratch directory."""

    sizes: Sizes
    systems: list[str]
    pythons: dict[str, str]
    url: str
    tmp: Path

    @property
    def probe(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def context(self, system: str, tag: str, jobs: dict[str, Any] | None = None) -> Context:
        module = load(system)
        ctx = Context(
            system, module.TITLE, self.url, self.pythons[system], self.tmp / f"{tag}.done"
        )
        if hasattr(module, "environment"):
            ctx.env = module.environment(
                self.url, self.tmp, f"bench-{uuid.uuid4().hex[:8]}", jobs or {}
            )
        return ctx

    def runs(self) -> dict[str, list[Result]]:
        runs: dict[str, list[Result]] = {s: [] for s in self.systems}
        order = sorted(self.systems, key=RUN_ORDER.index)
        for run in range(1, self.sizes.runs + 1):
            for system in order:
                for take in range(self.sizes.retakes + 1):
                    if self.sizes.patience:
                        settle(QUIET, self.sizes.patience, sys.stderr)
                    began = time.monotonic()
                    say(f"run {run}/{self.sizes.runs}: {system} ...")
                    tag = f"run{run}-{system}-{take}"
                    r = run_system(self.context(system, tag), self.probe, self.sizes, self.tmp)
                    say(
                        f"  enqueue {r.enqueue:,.0f}/s, bulk {r.bulk or 0:,.0f}/s, "
                        f"drain {r.drain:,.0f}/s, pickup p99 {r.pickup_ms[2]:.1f} ms, "
                        f"RSS {r.rss / 2**20:.0f} MiB, exit {r.exit_code}; "
                        f"{time.monotonic() - began:.1f} s, others used {r.others:.0%} of the CPU"
                    )
                    if r.others <= BUSY or take == self.sizes.retakes:
                        break
                    say(f"  (others used over {BUSY:.0%} of the CPU: taking this run again)")
                runs[system].append(r)
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
        self.probe.flushdb()
        return kills


def notes(labels: dict[str, str], runs: dict[str, list[Result]]) -> list[str]:
    """Exit codes other than 0, and the first worker log lines of each kind that look wrong."""
    lines = []
    for system, results in runs.items():
        codes = {r.exit_code for r in results}
        if codes != {0}:
            lines.append(f"  {labels[system]}: exit codes on SIGTERM {sorted(codes, key=str)}")
        seen: set[str] = set()
        for line in (line for r in results for line in r.odd):
            shape = re.sub(r"\d+", "#", line)
            if shape not in seen and len(seen) < 5:
                seen.add(shape)
                lines.append(f"  {labels[system]}: {line[:160]}")
    return lines


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
    parser.add_argument("--no-kill", action="store_true", help="leave out the kill -9 case")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--venvs", type=Path, default=ROOT / ".bench-venv", help="peer venvs")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    sizes = replace(sizes, jobs=args.jobs or sizes.jobs, runs=args.runs or sizes.runs)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    if not shutil.which("redis-server"):
        sys.exit("redis-server is not on PATH: the benchmark starts a private one")
    # SIGTERM (a CI timeout, kill) unwinds like an exception: every worker, driver and the
    # private redis-server are stopped by the finally blocks that started them.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    began, load_before = time.monotonic(), loadavg()
    labels = {s: load(s).TITLE for s in systems}
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
        versions = {s: runs[s][0].versions for s in systems}
        kills: dict[str, float | str | None] = {}
        if not args.no_kill:
            cases = {s: bench.context(s, f"kill-{s}") for s in systems}
            if "ours" in systems:
                cases["ours-short"] = bench.context("ours", "kill-ours-short", lease)
                if args.quick:  # the default lease takes longer than the whole quick run
                    del cases["ours"]
            kills = bench.kills(cases)
        redis_version = bench.probe.info("server")["redis_version"]
    elapsed, load_after = time.monotonic() - began, loadavg()

    cells = {name: fmt_kill(value, sizes.cap) for name, value in kills.items()}
    short = ", ".join(f"{k}={v:g}" for k, v in lease.items())
    if "ours-short" in cells:
        cells["ours-short"] += f" ({short})"
        if args.quick:
            cells["ours"] = cells["ours-short"]
    med = {system: medians(results) for system, results in runs.items()}
    info = machine()
    command = " ".join(["python -m bench", *sys.argv[1:]])
    print(
        f"{command}: N={sizes.jobs} jobs, M={sizes.pickups} pickups, "
        f"medians of {sizes.runs} run(s), {elapsed:.0f} s in all"
    )
    print(
        f"machine: {info['cores']} cores, {info['memory']}, {info['cpu']}, {info['kernel']}; "
        f"Redis {redis_version} (private, no persistence)"
    )
    print(f"django-jobs at {revision()}; load average before {load_before}, after {load_after}")
    print()
    print("\n".join(table(labels, med, cells)))
    print()
    print("x: ratio to django-jobs in this run (for jobs/s, above 1 is faster than django-jobs;")
    print("   for pickup p99, RSS and commands, above 1 is more). — : no bulk API.")
    print(
        "Peak PSS MiB (shared pages split among the processes that share them): "
        + ", ".join(f"{labels[s]} {m['pss']:.0f}" for s, m in med.items())
    )
    if "ours-short" in cells and not args.quick:
        print(f"django-jobs kill -9 with a short lease: {cells['ours-short']}")
    print("How each worker runs (one process tree each):")
    for system in systems:
        print(f"  {labels[system]:<12} {load(system).HOW}")
    print("Versions:")
    for system in systems:
        print(
            f"  {labels[system]:<12} " + ", ".join(f"{k} {v}" for k, v in versions[system].items())
        )
    busy = {s: [f"{r.others:.0%}" for r in rs] for s, rs in runs.items()}
    print(
        "CPU used by other processes during each run: "
        + "; ".join(f"{labels[s]} {' '.join(v)}" for s, v in busy.items())
    )
    if "ours" in runs and len(commits := {r.versions["commit"] for r in runs["ours"]}) > 1:
        print(f"WARNING: django-jobs changed between runs: {', '.join(sorted(commits))}")
    if odd := notes(labels, runs):
        print("Worker warnings and errors (first of each kind):")
        print("\n".join(odd))
    if args.json:
        data = {
            "command": command,
            "machine": info,
            "revision": revision(),
            "load": [load_before, load_after],
            "redis": redis_version,
            "sizes": asdict(sizes),
            "versions": versions,
            "runs": {s: [asdict(r) for r in rs] for s, rs in runs.items()},
            "medians": med,
            "kill9": kills,
            "seconds": elapsed,
        }
        args.json.write_text(json.dumps(data, indent=2))
    if "ours" in systems:  # the outbox's cost (bench/outbox.py), on SQLite and PostgreSQL
        print()
        outbox = [sys.executable, "-m", "bench.outbox", *(["--quick"] if args.quick else [])]
        subprocess.run(outbox, cwd=ROOT, check=True)
    if "ours" in systems:  # flows (bench/flows.py): starts/s, round trips, end-to-end latency
        print()
        flows = [sys.executable, "-m", "bench.flows", *(["--quick"] if args.quick else [])]
        subprocess.run(flows, cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
