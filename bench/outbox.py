"""What the transactional outbox costs: enqueue latency and throughput with and without it, on
SQLite and on PostgreSQL, and how fast a worker's relay drains a backlog.

    .venv/bin/python -m bench.outbox [--quick] [--count N] [--backlog B] [--redis-url URL]

`python -m bench` runs it at its end (`--quick` with --quick). Each database is measured in a
child process of its own (Django reads DATABASE_URL once): a fresh SQLite file, and a fresh
PostgreSQL database on POSTGRES_URL (postgres://postgres@127.0.0.1:5432/postgres; skipped when
it does not answer), migrated, dropped afterwards. Redis: a private redis-server (bench.common).

Phases, N enqueues of a no-op job each, one call at a time, after a warm-up:

1. ``plain``: Job.enqueue outside any transaction (one Redis round trip);
2. ``outbox``: Job.enqueue(outbox=True) outside a transaction: the row's own transaction (an
   INSERT and its commit), the send, and the DELETE of the row;
3. ``view, plain``: ``with atomic(): <one INSERT of the view's own>; Job.enqueue(on_commit=
   True)`` - what a view does today, sent after its commit;
4. ``view, outbox``: the same with outbox=True: the job's row commits with the view's row;
5. ``relay``: B rows left by an outage (written with no fast path), drained by
   ``Relay.relay()`` batches of 500 as a worker's ticks do, back to back: rows/s.

Latency p50/p99 is per call (the whole atomic block for 3 and 4, commit and fast path included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.common import delete_namespace, private_redis

POSTGRES_URL = os.environ.get("POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
FULL = (2000, 100_000)
QUICK = (200, 5000)


@dataclass(frozen=True)
class Phase:
    name: str
    jobs: int
    seconds: float
    p50_ms: float
    p99_ms: float


def _timed(name: str, count: int, call: Callable[[int], None]) -> Phase:
    call(-1)  # warm-up: connections, scripts
    laps = []
    start = time.perf_counter()
    for n in range(count):
        t = time.perf_counter()
        call(n)
        laps.append(time.perf_counter() - t)
    seconds = time.perf_counter() - start
    laps.sort()
    p99 = laps[min(len(laps) - 1, int(len(laps) * 0.99))]
    return Phase(name, count, seconds, statistics.median(laps) * 1000, p99 * 1000)


def child(redis_url: str, count: int, backlog: int) -> list[Phase]:
    """Measure in this process, on the database of DATABASE_URL (migrated here)."""
    import logging
    from dataclasses import dataclass as dc

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["REDIS_URL"] = redis_url
    os.environ["JOBS_NAMESPACE"] = f"bench-outbox-{uuid.uuid4().hex[:8]}"
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from django_jobs import Job
    from django_jobs.backends import outbox
    from django_jobs.broker.protocol import Accepted
    from django_jobs.client import get_broker
    from django_jobs.models import OutboxJob, ProcessedTask
    from django_jobs.worker.relay import Relay

    logging.getLogger("django_jobs").setLevel(logging.ERROR)
    call_command("migrate", verbosity=0, interactive=False)

    @dc(frozen=True)
    class Nothing:
        n: int

    class Nop(Job[Nothing]):
        name = "bench.OutboxNop"

        def run(self, payload: Nothing) -> None:
            pass

    def plain(n: int) -> None:
        Nop.enqueue(Nothing(n))

    def outboxed(n: int) -> None:
        Nop.enqueue(Nothing(n), outbox=True)

    def view(use_outbox: bool) -> Callable[[int], None]:
        def call(n: int) -> None:
            with transaction.atomic():
                ProcessedTask.objects.create(key=f"{use_outbox}:{n}:{uuid.uuid4().hex}")
                Nop.enqueue(Nothing(n), on_commit=True, outbox=use_outbox)

        return call

    phases = [
        _timed("plain", count, plain),
        _timed("outbox", count, outboxed),
        _timed("view, plain", count, view(False)),
        _timed("view, outbox", count, view(True)),
    ]
    assert not OutboxJob.objects.exists(), "the fast path left rows behind"

    class NoFastPath:
        def submit(self, submissions: object) -> list[Accepted]:
            return [Accepted(outbox.OUTBOXED)] * len(submissions)  # type: ignore[arg-type]

    outbox._backends[connection.alias] = NoFastPath()  # type: ignore[assignment]
    for start in range(0, backlog, 5000):
        Nop.enqueue_many(
            [Nothing(n) for n in range(start, min(backlog, start + 5000))], outbox=True
        )
    outbox._backends.clear()
    relay = Relay(get_broker(), "bench", fresh=0.0)
    began = time.perf_counter()
    while relay.relay(connection.alias):
        pass
    seconds = time.perf_counter() - began
    left = OutboxJob.objects.count()
    assert left == 0, f"{left} rows left"
    phases.append(Phase("relay", backlog, seconds, 0.0, 0.0))
    delete_namespace(get_broker().client, os.environ["JOBS_NAMESPACE"])
    return phases


def _postgres_database() -> tuple[str, Callable[[], None]] | None:
    """A fresh database on POSTGRES_URL and how to drop it; None if PostgreSQL is not there."""
    try:
        import psycopg
    except ImportError:
        return None
    name = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=2) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error:
        return None

    def drop() -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}", drop


def run(redis_url: str, count: int, backlog: int) -> dict[str, list[Phase] | str]:
    """Every database's phases (or why it was skipped), each measured in a child process."""
    results: dict[str, list[Phase] | str] = {}
    root = Path(__file__).resolve().parents[1]
    with TemporaryDirectory(prefix="bench-outbox-") as tmp:
        databases: list[tuple[str, str, Callable[[], None]]] = [
            ("SQLite", f"sqlite:///{tmp}/outbox.sqlite3", lambda: None)
        ]
        pg = _postgres_database()
        if pg is None:
            results["PostgreSQL"] = f"skipped: no PostgreSQL at {POSTGRES_URL}"
        else:
            databases.append(("PostgreSQL", *pg))
        for label, url, drop in databases:
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "bench.outbox", "--child", "--redis-url", redis_url,
                     "--count", str(count), "--backlog", str(backlog)],
                    cwd=root, env={**os.environ, "DATABASE_URL": url}, capture_output=True,
                    text=True, check=False,
                )  # fmt: skip
            finally:
                drop()
            if done.returncode:
                raise SystemExit(f"bench.outbox on {label} failed:\n{done.stderr}")
            results[label] = [Phase(**p) for p in json.loads(done.stdout.splitlines()[-1])]
    return results


def report(results: dict[str, list[Phase] | str], count: int, backlog: int) -> str:
    lines = [
        f"Outbox: N={count} enqueues per phase, one call at a time; relay of {backlog} rows",
        f"{'database':<11}{'phase':<14}{'jobs/s':>9}{'p50 ms':>9}{'p99 ms':>9}",
    ]
    for label, phases in results.items():
        if isinstance(phases, str):
            lines.append(f"{label:<11}{phases}")
            continue
        for p in phases:
            rate = p.jobs / p.seconds if p.seconds else 0.0
            lat = ("", "") if p.name == "relay" else (f"{p.p50_ms:.2f}", f"{p.p99_ms:.2f}")
            lines.append(f"{label:<11}{p.name:<14}{rate:>9,.0f}{lat[0]:>9}{lat[1]:>9}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.outbox", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"N, B = {QUICK}, not {FULL}")
    parser.add_argument("--count", type=int)
    parser.add_argument("--backlog", type=int)
    parser.add_argument("--redis-url", help="default: a private redis-server")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    count, backlog = QUICK if args.quick else FULL
    count, backlog = args.count or count, args.backlog or backlog
    if args.child:
        phases = child(args.redis_url, count, backlog)
        print(json.dumps([p.__dict__ for p in phases]))
        return
    if args.redis_url:
        print(report(run(args.redis_url, count, backlog), count, backlog))
        return
    with private_redis() as url:
        print(report(run(url, count, backlog), count, backlog))


if __name__ == "__main__":
    main()
