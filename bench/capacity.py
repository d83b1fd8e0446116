"""The design note's capacity estimate, measured: 280 jobs/s offered for 60 s, 400 ms jobs.

    .venv/bin/python -m bench.capacity [--quick] [--layouts 12x10,4x30,2x60] [--seconds S]

The note's sums (docs/bench.rst, "Capacity"): 10 slots / 0.4 s = 25 jobs/s per worker process,
so 280 jobs/s at peak needs 12 processes of concurrency 10, holding up to 120 database
connections; a retained task costs about 1 KB of Redis. Per layout (processes x concurrency):

1. a private redis-server and a private PostgreSQL (initdb as the postgres user, on free ports,
   max_connections 400, no fsync), so no other client shares either;
2. start the `runworker --concurrency C` processes and wait until all are registered;
3. offer RATE jobs/s for SECONDS from this process, one Visitor.enqueue each on a fixed
   schedule: a payload of 1 KB of data, a job that runs one query on PostgreSQL (a connection
   held for the rest of the run, as a real job's), sleeps 400 ms and records how long after its
   enqueue it started;
4. every 0.5 s: the pending depth, Redis used_memory, the server connections to PostgreSQL
   (pg_stat_activity, this sampler's own left out), each worker tree's CPU time, every 2 s
   their RSS and PSS;
5. after the offer, wait for every job to finish (up to 60 s), then SIGTERM.

Reported: throughput held (jobs finished per second from second 10 of the offer to its end),
the offered rate actually sent, the deepest queue, enqueue-to-start p50/p99, CPU (share of a
core) and PSS/RSS per worker process, Redis memory growth per second (every task is kept for the
default RETENTION, 24 h), database connections held (median and peak), and the machine's load.

--quick: 30 jobs/s for 10 s, layout 2x10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench.common import private_redis
from bench.harness import keep_priority, pss, rss, tree, wait_until
from bench.peers import ROOT

HZ = os.sysconf("SC_CLK_TCK")
#: The data directory of each private PostgreSQL running, by URL (for its CPU time).
PRIVATE_DATA: dict[str, Path] = {}
PAYLOAD_BYTES = 1024
JOB_SECONDS = 0.4
QUEUE = "default"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for version in sorted(Path("/usr/lib/postgresql").glob("*"), reverse=True):
        if (version / "bin" / name).exists():
            return str(version / "bin" / name)
    raise SystemExit(f"{name} not found: bench.capacity starts a private PostgreSQL")


@contextlib.contextmanager
def private_postgres(max_connections: int = 400) -> Iterator[str]:
    """initdb and start a PostgreSQL of our own (as the postgres user when run as root); yield
    its URL; stop it and delete its files at the end."""
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(data, "postgres")
    log = data / "server.log"
    try:
        initdb = [_pg_bin("initdb"), "-D", str(data / "db"), "-U", "postgres", "--auth=trust"]
        subprocess.run([*as_user, *initdb], check=True, capture_output=True, timeout=120)
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={data} "
                   f"-c max_connections={max_connections} -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off")  # fmt: skip
        start = [_pg_bin("pg_ctl"), "-D", str(data / "db"), "-l", str(log), "-o", options, "-w"]
        subprocess.run([*as_user, *start, "start"], check=True, capture_output=True, timeout=120)
        url = f"postgres://postgres@127.0.0.1:{port}/postgres"
        PRIVATE_DATA[url] = data
        yield url
    except BaseException:
        with contextlib.suppress(OSError):  # what the server said, for the failure's reader
            shutil.copy(log, Path(tempfile.gettempdir()) / "bench-capacity-postgres.log")
            print(f"(PostgreSQL's log: {tempfile.gettempdir()}/bench-capacity-postgres.log)")
        raise
    finally:
        subprocess.run([*as_user, _pg_bin("pg_ctl"), "-D", str(data / "db"), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(data, ignore_errors=True)


def machine_ticks() -> tuple[int, int]:
    """(idle, all) jiffies of the whole machine since boot (/proc/stat's cpu line)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)  # idle + iowait


def postmaster(url: str) -> int | None:
    """The postmaster's pid of the private PostgreSQL at url; None for SQLite. Its CPU ticks
    count the backends it reaped (cutime), so ticks(tree(it)) is the whole server's."""
    data = PRIVATE_DATA.get(url)
    if data is None:
        return None
    return int((data / "db" / "postmaster.pid").read_text().split()[0])


def ticks(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rfind(")") + 2 :].split()
            total += sum(int(v) for v in fields[11:15])
        except OSError:
            pass
    return total


@dataclass
class Samples:
    depth: list[int] = field(default_factory=list)
    memory: list[tuple[float, int]] = field(default_factory=list)
    connections: list[int] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)  # summed over all worker trees
    pss: list[int] = field(default_factory=list)


def sqlite_connections(path: str, roots: list[int]) -> int:
    """Open descriptors of the SQLite file in the worker trees: the connections they hold."""
    count = 0
    for pid in set().union(*(tree(r) for r in roots)):
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    count += os.readlink(fd.path) == path
    return count


def sample(
    stop: threading.Event, samples: Samples, probe: redis.Redis, pending: str, db_url: str,
    roots: list[int],
) -> None:  # fmt: skip
    with contextlib.ExitStack() as stack:
        if db_url.startswith("sqlite"):
            path = db_url.removeprefix("sqlite:///")
            pg = None
        else:
            import psycopg

            pg = stack.enter_context(psycopg.connect(db_url, autocommit=True))
        n = 0
        while not stop.wait(0.5):
            samples.depth.append(int(probe.llen(pending)))
            samples.memory.append((time.monotonic(), int(probe.info("memory")["used_memory"])))
            if pg is None:
                samples.connections.append(sqlite_connections(path, roots))
            else:
                row = pg.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                    "AND pid <> pg_backend_pid()"
                ).fetchone()
                samples.connections.append(int(row[0]) if row else 0)
            if n % 4 == 0:
                pids = set().union(*(tree(r) for r in roots))
                samples.rss.append(rss(pids))
                samples.pss.append(pss(pids))
            n += 1


def start_workers(processes: int, concurrency: int, env: dict[str, str], tmp: Path) -> list[Any]:
    workers = []
    for i in range(processes):
        with (tmp / f"worker-{i}.log").open("wb") as out:
            workers.append(subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", "--concurrency",
                 str(concurrency), "--queues", QUEUE],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
        keep_priority(workers[-1].pid)
    return workers


def stop_workers(workers: list[Any]) -> list[int | None]:
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for w in workers:
        try:
            codes.append(w.wait(timeout=60))
        except subprocess.TimeoutExpired:
            os.killpg(w.pid, signal.SIGKILL)
            w.wait(timeout=10)
            codes.append(None)
    return codes


@contextlib.contextmanager
def database(kind: str, tmp: str) -> Iterator[str]:
    if kind == "postgres":
        with private_postgres() as url:
            yield url
    else:
        yield f"sqlite:///{tmp}/capacity.sqlite3"


def layout(
    processes: int, concurrency: int, rate: float, seconds: float, db: str, conn_max_age: int = 0
) -> dict[str, Any]:
    from django.test.utils import override_settings

    from django_jobs.keys import QueueKeys, workers
    from testproject.probes.jobs import Visit, Visitor

    namespace = f"cap-{uuid.uuid4().hex[:8]}"
    data = "x" * PAYLOAD_BYTES
    with private_redis() as url, tempfile.TemporaryDirectory() as tmp, \
            database(db, tmp) as pg_url:  # fmt: skip
        server = postmaster(pg_url)
        workers_url = pg_url  # the workers' DATABASE_URL: with Django's persistent connections?
        if conn_max_age and db == "postgres":
            workers_url = f"{pg_url}?conn_max_age={conn_max_age}"  # read by django-environ
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings", "REDIS_URL": url,
               "JOBS_NAMESPACE": namespace, "JOBS_LOG_LEVEL": "WARNING",
               "DATABASE_URL": workers_url, "PYTHONUNBUFFERED": "1"}  # fmt: skip
        probe = redis.Redis.from_url(url)
        keys = QueueKeys(namespace, QUEUE)
        visits = f"{namespace}:probe:visits"
        load_before = Path("/proc/loadavg").read_text().split()[:3]
        subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"], cwd=ROOT,
                       env=env, check=True, timeout=300)  # fmt: skip
        began = time.monotonic()
        procs = start_workers(processes, concurrency, env, Path(tmp))
        try:
            wait_until(
                f"{processes} workers registered",
                lambda: (
                    probe.zcard(workers(namespace)) >= processes
                    and all(p.poll() is None for p in procs)
                ),
                timeout=300,
                poll=0.2,
            )
            startup = time.monotonic() - began
            time.sleep(2.0)  # let every child reach its first blocking fetch
            roots = [p.pid for p in procs]
            samples, stop = Samples(), threading.Event()
            sampler = threading.Thread(
                target=sample, args=(stop, samples, probe, keys.pending, pg_url, roots)
            )
            jobs = {"REDIS_URL": url, "NAMESPACE": namespace}
            cpu0 = [ticks(tree(r)) for r in roots]
            idle0, pg0 = machine_ticks(), (ticks(tree(server)) if server else 0)
            sampler.start()
            with override_settings(JOBS=jobs):
                total = int(rate * seconds)
                t0 = time.monotonic()
                done_at: list[tuple[float, int]] = []
                for i in range(total):
                    due = t0 + i / rate
                    while (now := time.monotonic()) < due:
                        time.sleep(min(due - now, 0.002))
                    Visitor.enqueue(Visit(time.time(), JOB_SECONDS, data))
                    if i % int(rate) == 0:
                        done_at.append((time.monotonic() - t0, int(probe.llen(visits))))
                sent_for = time.monotonic() - t0
                done_at.append((sent_for, int(probe.llen(visits))))
                cpu1 = [ticks(tree(r)) for r in roots]
                idle1, pg1 = machine_ticks(), (ticks(tree(server)) if server else 0)
            wait_until("every job finished", lambda: probe.llen(visits) >= total, 60, poll=0.1)
            stop.set()
            sampler.join(timeout=10)
            waits = sorted(float(v) * 1000 for v in probe.lrange(visits, 0, -1))
        finally:
            codes = stop_workers(procs)
        q = statistics.quantiles(waits, n=100, method="inclusive")
        steady = [(t, n) for t, n in done_at if t >= min(10.0, seconds / 3)]
        (ta, na), (tb, nb) = steady[0], steady[-1]
        held = (nb - na) / (tb - ta) if tb > ta else 0.0
        (m0t, m0), (m1t, m1) = samples.memory[0], samples.memory[-1]
        cpu_share = [(b - a) / HZ / sent_for for a, b in zip(cpu0, cpu1, strict=True)]
        return {
            "layout": f"{processes}x{concurrency}", "processes": processes,
            "concurrency": concurrency, "offered": rate, "sent": total / sent_for,
            "held": held, "jobs": total, "startup_s": startup,
            "depth_max": max(samples.depth), "depth_median": statistics.median(samples.depth),
            "start_p50_ms": q[49], "start_p99_ms": q[98], "start_max_ms": waits[-1],
            "cpu_per_process": statistics.mean(cpu_share), "cpu_all": sum(cpu_share),
            "pss_per_process": max(samples.pss) / processes,
            "rss_per_process": max(samples.rss) / processes,
            "redis_growth_per_s": (m1 - m0) / (m1t - m0t), "redis_bytes_per_job": (m1 - m0) / total,
            "connections_median": statistics.median(samples.connections),
            "connections_max": max(samples.connections), "exit_codes": codes,
            "database": db, "conn_max_age": conn_max_age,
            "machine_idle": (idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]),
            "database_cpu": (pg1 - pg0) / HZ / sent_for, "load_before": " ".join(load_before),
            "load_after": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        }  # fmt: skip


def show(r: dict[str, Any]) -> None:
    print(
        f"{r['layout']:>6}: offered {r['offered']:.0f}/s (sent {r['sent']:.1f}/s), held "
        f"{r['held']:.1f}/s; queue depth max {r['depth_max']} (median {r['depth_median']:.0f}); "
        f"enqueue-to-start p50 {r['start_p50_ms']:.1f} ms, p99 {r['start_p99_ms']:.1f} ms, max "
        f"{r['start_max_ms']:.0f} ms"
    )
    print(
        f"        per worker (a supervisor and its children): CPU "
        f"{r['cpu_per_process']:.1%} of a core (all "
        f"{r['cpu_all']:.0%}), PSS {r['pss_per_process'] / 2**20:.0f} MiB, RSS "
        f"{r['rss_per_process'] / 2**20:.0f} MiB; Redis +{r['redis_growth_per_s'] / 1024:.0f} "
        f"KiB/s ({r['redis_bytes_per_job']:,.0f} bytes a job, kept 24 h); {r['database']} "
        f"connections median {r['connections_median']:.0f}, peak {r['connections_max']}; "
        f"start-up {r['startup_s']:.0f} s; exit codes {sorted(set(r['exit_codes']), key=str)}; "
        f"load {r['load_before']} -> {r['load_after']}"
    )
    print(
        f"        machine idle {r['machine_idle']:.0%} during the offer; PostgreSQL's processes "
        f"{r['database_cpu']:.0%} of a core (CONN_MAX_AGE {r['conn_max_age']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="30 jobs/s for 10 s, 2x10")
    parser.add_argument("--layouts", default="12x10,4x30,2x60", help="processes x concurrency")
    parser.add_argument("--rate", type=float, default=280.0, help="jobs/s offered (280)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long (60)")
    parser.add_argument(
        "--database", choices=("postgres", "sqlite"), default="postgres",
        help="a private PostgreSQL (connections from pg_stat_activity), or SQLite (connections: "
        "the worker processes' open descriptors of its file)",
    )  # fmt: skip
    parser.add_argument(
        "--conn-max-age", type=int, default=0,
        help="the workers' CONN_MAX_AGE on PostgreSQL (0, Django's default: a connection per job)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.layouts, args.rate, args.seconds = "2x10", 30.0, 10.0
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    import logging

    logging.getLogger("django_jobs").setLevel(logging.WARNING)
    results = []
    print(
        f"bench.capacity: {args.rate:g} jobs/s offered for {args.seconds:g} s, jobs of "
        f"{JOB_SECONDS * 1000:.0f} ms with {PAYLOAD_BYTES} bytes of data; {os.cpu_count()} cores"
    )
    for item in args.layouts.split(","):
        processes, concurrency = (int(v) for v in item.lower().split("x"))
        result = layout(
            processes, concurrency, args.rate, args.seconds, args.database, args.conn_max_age
        )
        show(result)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
