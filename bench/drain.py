"""Drain throughput and idle pickup latency of a real `manage.py runworker`, with its Redis cost.

    .venv/bin/python -m bench.drain [--quick] [--redis-url URL] [--against TREE [--repeat K]]

For each concurrency (2, 4, 10), one worker process serves the default queue:

1. start `runworker --concurrency C --queues default` and wait until it is in `<ns>:workers`;
2. drain: enqueue_many N no-op jobs (probes.Noop) and time from the enqueue until the pending
   and active lists are empty and the processed counter reaches N (polled every 10 ms);
3. idle: the Redis commands per second the idle worker runs, over 3 s;
4. pickup: enqueue M probes.Stamp jobs 20 ms apart; each records how long after its enqueue it
   started (percentiles of M);
5. SIGTERM, and check that the worker exits 0.

N=20000 and M=200 (--quick: 2000 and 50). cmds/job counts `INFO commandstats` (commands run
inside Lua scripts included) over the drain, less the enqueue's own commands (measured before any
worker runs) and this script's polling: what the worker spends per job, background loops
included. By default a private redis-server is started, so no other client skews the counts.
Only the keys of our own namespace are deleted; a server we started is then stopped.

A/B: `--against TREE` (another checkout: `git worktree add /tmp/base REV`) runs each round K
times (`--repeat`, 3) for both trees, interleaved (this tree, that tree, then the other way
round), on the same Redis with the same enqueue, so that a machine that drifts affects both
alike. It prints each tree's rows and, per concurrency, this tree's jobs/s over that tree's:
the ratio of each interleaved pair and their median, and both cmds/job.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.common import (
    DEFAULT_URL,
    bench_redis,
    calls_since,
    commandstats,
    delete_namespace,
    versions,
)

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCIES = (2, 4, 10)
QUEUE = "default"
#: Longest any wait may last: the benchmark fails rather than hangs.
DEADLINE = 300.0
POLL = 0.01
IDLE_SECONDS = 3.0
SPACING = 0.02
#: The worker's one line per task outcome, with the run's duration.
TASK_LINE = re.compile(r"^probes\.\w+ \S+ completed \(attempt \d+, ([\d.]+)s\)$")


@dataclass(frozen=True)
class Row:
    concurrency: int
    seconds: float
    cmds_per_job: float
    pickup_ms: tuple[float, float, float]
    idle_cmds_per_s: float
    exit_code: int | None
    slowest_task: float
    other_log_lines: list[str]


def wait_for(
    what: str, done: Callable[[], bool], worker: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll done() every 10 ms until it is true; fail if the worker exits or past DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        if worker is not None and worker.poll() is not None:
            raise RuntimeError(f"{what}: the worker exited with code {worker.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {DEADLINE:g}s")
        time.sleep(POLL)


def start_worker(
    concurrency: int, env: dict[str, str], log: Path, root: Path = ROOT
) -> subprocess.Popen[bytes]:
    """`runworker` of the tree at root (its manage.py puts that tree first on sys.path)."""
    args = ["runworker", "--concurrency", str(concurrency), "--queues", QUEUE]
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(root / "manage.py"), *args],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def stop_worker(worker: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM; return the exit code, or None if it did not exit within 60 s (then kill it)."""
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)  # its own session: the supervisor and children
        worker.wait(timeout=10)
        return None


def one_round(
    concurrency: int,
    count: int,
    pickups: int,
    probe: redis.Redis,
    enqueue_cmds: float,
    tmp: Path,
    root: Path = ROOT,
) -> Row:
    from django_jobs.client import get_broker
    from django_jobs.keys import today, workers
    from testproject.probes.jobs import Noop, Number, Sent, Stamp

    broker = get_broker()
    namespace, k = broker.settings.namespace, broker.keys(QUEUE)
    log = tmp / f"worker-{concurrency}.log"
    worker = start_worker(concurrency, {**os.environ, "PYTHONUNBUFFERED": "1"}, log, root)
    try:
        member = f":{worker.pid}:"  # worker ids are host:pid:random
        wait_for(
            "worker in the registry",
            lambda: any(member in w for w in probe.zrange(workers(namespace), 0, -1)),
            worker,
        )

        days, polls = {today()}, 0

        def drained() -> bool:
            nonlocal polls
            polls += 1
            days.add(today())  # the processed counter is per UTC day
            pipe = probe.pipeline(transaction=False)
            pipe.llen(k.pending)
            pipe.llen(k.active)
            pipe.mget([k.processed(day) for day in days])
            pending, active, processed = pipe.execute()
            return pending == active == 0 and sum(int(n or 0) for n in processed) >= count

        before = commandstats(probe)
        start = time.perf_counter()
        Noop.enqueue_many(Number(n) for n in range(count))
        wait_for("drain", drained, worker)
        seconds = time.perf_counter() - start
        drain_cmds = calls_since(probe, before) - 3 * polls - enqueue_cmds * count

        time.sleep(0.5)  # let the supervisor use up the wake-up tokens the enqueue left
        before = commandstats(probe)
        time.sleep(IDLE_SECONDS)
        idle = calls_since(probe, before) / IDLE_SECONDS

        latencies = f"{namespace}:probe:latency"
        first = time.monotonic()
        for n in range(pickups):
            Stamp.enqueue(Sent(time.time()))
            time.sleep(max(0.0, first + (n + 1) * SPACING - time.monotonic()))
        wait_for("pickups", lambda: probe.llen(latencies) >= pickups, worker)
        ms = [float(v) * 1000 for v in probe.lrange(latencies, 0, -1)]
        q = statistics.quantiles(ms, n=100, method="inclusive")
        exit_code = stop_worker(worker)
    except BaseException:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        print("worker log (end):", *tail, sep="\n  ", file=sys.stderr)
        raise
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)

    slowest, others = 0.0, []
    for line in log.read_text(errors="replace").splitlines():
        if match := TASK_LINE.match(line):
            slowest = max(slowest, float(match[1]))
        else:
            others.append(line)
    return Row(
        concurrency, seconds, drain_cmds / count, (q[49], q[94], q[98]), idle, exit_code,
        slowest, others,
    )  # fmt: skip


def bench(
    url: str,
    where: str,
    count: int,
    pickups: int,
    tmp: Path,
    against: Path | None = None,
    repeat: int = 1,
) -> bool:
    """Run every round (interleaved with the tree `against`, `repeat` times each) and print the
    tables; return whether every worker exited 0."""
    from django_jobs.client import get_broker
    from testproject.probes.jobs import Noop, Number  # after django.setup(), or misnamed

    broker = get_broker()
    namespace = broker.settings.namespace
    probe = redis.Redis.from_url(url, decode_responses=True)
    trees = [ROOT] if against is None else [ROOT, against]
    rows: dict[Path, list[Row]] = {tree: [] for tree in trees}
    deleted = 0
    try:
        for script in broker.scripts.values():  # nobody pays for a NOSCRIPT reload
            broker.client.script_load(script.script)
        before = commandstats(probe)  # no worker runs yet: these are the enqueue's own
        Noop.enqueue_many(Number(n) for n in range(count))
        enqueue_cmds = calls_since(probe, before) / count
        deleted = delete_namespace(probe, namespace)
        turn = 0
        for _ in range(repeat):
            for concurrency in CONCURRENCIES:  # each round starts from an empty namespace
                for tree in trees if turn % 2 == 0 else trees[::-1]:
                    row = one_round(concurrency, count, pickups, probe, enqueue_cmds, tmp, tree)
                    rows[tree].append(row)
                    deleted += delete_namespace(probe, namespace)
                turn += 1
    finally:
        deleted += delete_namespace(probe, namespace)

    print(f"django-jobs drain benchmark: N={count}, M={pickups}, {where}, namespace {namespace}")
    print(versions(probe))
    for tree in trees:
        print(f"\n{tree}:" if against is not None else "")
        _table(rows[tree], count)
    print(f"\n(cmds/job leaves out enqueue_many's own {enqueue_cmds:.2f} commands/job)")
    if against is not None:
        _ratios(rows[ROOT], rows[against], count, against)
    for r in rows[ROOT][: len(CONCURRENCIES)]:
        print(f"\nworker log, concurrency {r.concurrency}: slowest task {r.slowest_task:.3f}s;")
        print("\n".join(f"  {line}" for line in r.other_log_lines[:20]))
    print(f"\n(deleted {deleted} keys of namespace {namespace})")
    return all(r.exit_code == 0 for tree in trees for r in rows[tree])


def _table(rows: list[Row], count: int) -> None:
    head = ("concurrency", "drain s", "jobs/s", "cmds/job", "pickup p50 ms", "p95 ms", "p99 ms",
            "idle cmds/s", "exit")  # fmt: skip
    print(
        f"{head[0]:>11}{head[1]:>9}{head[2]:>8}{head[3]:>10}{head[4]:>15}{head[5]:>8}"
        f"{head[6]:>8}{head[7]:>13}{head[8]:>6}"
    )
    for r in rows:
        p50, p95, p99 = r.pickup_ms
        print(
            f"{r.concurrency:>11}{r.seconds:>9.2f}{count / r.seconds:>8.0f}{r.cmds_per_job:>10.2f}"
            f"{p50:>15.1f}{p95:>8.1f}{p99:>8.1f}{r.idle_cmds_per_s:>13.1f}{r.exit_code!s:>6}"
        )


def _ratios(ours: list[Row], theirs: list[Row], count: int, against: Path) -> None:
    """Per concurrency: our jobs/s over theirs for each interleaved pair, and the median."""
    print(f"\nA/B: this tree ({ROOT}) over {against}, jobs/s of each interleaved pair:")
    for concurrency in CONCURRENCIES:
        pairs = [(a, b) for a, b in zip(ours, theirs, strict=True) if a.concurrency == concurrency]
        ratios = [b.seconds / a.seconds for a, b in pairs]  # same count: a time ratio
        cmds = (statistics.mean(a.cmds_per_job for a, _ in pairs),
                statistics.mean(b.cmds_per_job for _, b in pairs))  # fmt: skip
        print(
            f"  concurrency {concurrency:>2}: "
            + ", ".join(f"{count / a.seconds:.0f}/{count / b.seconds:.0f}" for a, b in pairs)
            + f"; ratios {', '.join(f'{r:.2f}' for r in ratios)};"
            + f" median {statistics.median(ratios):.2f}; cmds/job {cmds[0]:.2f} vs {cmds[1]:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.drain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="N=2000, M=50")
    parser.add_argument(
        "--redis-url",
        help=f"an existing Redis (default: a private redis-server, else {DEFAULT_URL})",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="TREE",
        help="A/B: another checkout whose worker runs each round too, interleaved with ours",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="with --against: rounds per tree (3)"
    )
    args = parser.parse_args()
    if args.against is not None and not (args.against / "manage.py").is_file():
        parser.error(f"--against {args.against}: no manage.py there (a checkout of this repo?)")
    count, pickups = (2000, 50) if args.quick else (20_000, 200)

    with bench_redis(args.redis_url, None) as (url, where), tempfile.TemporaryDirectory() as tmp:
        # Read by the settings of this process and of the workers it starts.
        os.environ.update(
            DJANGO_SETTINGS_MODULE="testproject.settings",
            REDIS_URL=url,
            JOBS_NAMESPACE=f"bench-{uuid.uuid4().hex[:12]}",
            DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3",
        )
        import django

        django.setup()
        repeat = args.repeat if args.against is not None else 1
        ok = bench(url, where, count, pickups, Path(tmp), args.against, repeat)
    if not ok:
        sys.exit("a worker did not exit 0 on SIGTERM")


if __name__ == "__main__":
    main()
