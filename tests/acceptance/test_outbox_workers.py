"""The outbox with real processes on PostgreSQL: a web process killed (kill -9) between its
commit and its fast path loses nothing; two workers relaying one backlog send each job once.

The workers and the killed process use the test's own PostgreSQL database (transaction=True, so
that they see its rows); on SQLite (an in-memory database no other process can open) those two
are skipped. The SQLite relay (one relay at a time, by a lease) is tested with two workers on a
migrated SQLite file of their own, whatever the leg's database.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_jobs.backends import outbox
from django_jobs.broker.protocol import Accepted
from django_jobs.models import OutboxJob, OutboxRelay
from testproject.probes.jobs import Tally, Work
from tests.acceptance.conftest import ROOT, Worker, probe
from tests.conftest import RedisNamespace, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
#: The tests whose processes share the test's own database.
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="other processes share the test database"
)

#: The web process: enqueue in a transaction with the outbox, and die right after the commit,
#: before the fast path runs (its first step is OutboxBackend.submit).
KILLED = textwrap.dedent(
    """
    import os, signal, django
    django.setup()
    from django.db import transaction
    from django_jobs.backends import outbox
    from testproject.probes.jobs import Tally, Work

    outbox.OutboxBackend.submit = lambda self, s: os.kill(os.getpid(), signal.SIGKILL)
    with transaction.atomic():
        handle = Tally.enqueue(Work("killed"), outbox=True)
        print(handle.id, handle.state, flush=True)
    print("survived", flush=True)
    """
)


RELAYED = re.compile(r"relayed (\d+) job\(s\) from the outbox")


def database_url() -> str:
    """The test database, as DATABASE_URL for another process."""
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def tally(ns: RedisNamespace) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in ns.client.hgetall(probe(ns, "tally")).items()}


def start(ns: RedisNamespace, tmp_path: Path, name: str, *args: str) -> Worker:
    worker = Worker(ns.url, ns.namespace, tmp_path / f"{name}.log", database_url())
    return worker.start(*args, OUTBOX=True)


@postgres_only
def test_outbox__killed_between_commit_and_fast_path_loses_nothing(
    redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL=database_url(),
        REDIS_URL=redis_ns.url,
        JOBS_NAMESPACE=redis_ns.namespace,
        JOBS_EXTRA=json.dumps({"OUTBOX": True}),
    )
    web = subprocess.run(
        [sys.executable, "-c", KILLED], cwd=ROOT, env=env, capture_output=True, timeout=60
    )

    assert web.returncode == -signal.SIGKILL, web.stderr.decode()
    job_id, state = web.stdout.decode().split()  # "survived" never printed
    assert state == "outboxed"
    assert list(OutboxJob.objects.values_list("job_id", flat=True)) == [job_id]  # committed
    assert [k for k in redis_ns.keys() if ":t:" in k] == []  # and never sent
    worker = start(redis_ns, tmp_path, "worker", "--concurrency", "1")
    try:
        wait_until(lambda: tally(redis_ns) == {"killed": 1}, timeout=30, why=worker.output)
        wait_until(lambda: not OutboxJob.objects.exists(), timeout=10, why=worker.output)
    finally:
        worker.kill()


class _NoFastPath:
    def submit(self, submissions: Any) -> list[Accepted]:
        return [Accepted(outbox.OUTBOXED)] * len(submissions)


@postgres_only
def test_outbox__two_workers_relaying_ten_thousand_rows_run_each_job_once(
    redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    workers = [start(redis_ns, tmp_path, f"w{i}", "--concurrency", "2") for i in range(2)]
    try:
        for w in workers:
            wait_until(lambda w=w: " ready" in w.output(), timeout=30, why=w.output)
        # The backlog an outage leaves: committed rows that no fast path sent.
        outbox._backends[connection.alias] = _NoFastPath()  # type: ignore[assignment]
        try:
            with transaction.atomic():
                Tally.enqueue_many([Work(f"t{i}") for i in range(10_000)], outbox=True)
                # Due in six slices over 3 s (a relay leaves rows under a second old to their
                # fast path): one relay alone drains 10,000 rows faster than the other's next
                # tick comes, so without this the test might not see both at work.
                first = OutboxJob.objects.order_by("pk").values_list("pk", flat=True)[0]
                for k in range(6):
                    OutboxJob.objects.filter(
                        pk__gte=first + k * 1667, pk__lt=first + (k + 1) * 1667
                    ).update(created_at=timezone.now() + timedelta(seconds=k * 0.5))
        finally:
            outbox._backends.clear()
        assert OutboxJob.objects.count() == 10_000

        def all_ran() -> bool:
            return sum(tally(redis_ns).values()) >= 10_000

        wait_until(all_ran, timeout=120, interval=0.2, why=lambda: workers[0].output()[-3000:])
        wait_until(lambda: not OutboxJob.objects.exists(), timeout=10)
    finally:
        for w in workers:
            w.kill()
    runs = tally(redis_ns)
    assert len(runs) == 10_000
    assert set(runs.values()) == {1}
    # Sent once, not merely run once (a second send of an id changes nothing in Redis): the
    # relays' own counts add up to the backlog, and both relays took part.
    relayed = [sum(map(int, RELAYED.findall(w.output()))) for w in workers]
    assert sum(relayed) == 10_000, relayed
    assert all(relayed), relayed


#: Write a backlog into the outbox of DATABASE_URL as an outage leaves it (no fast path).
BACKLOG = textwrap.dedent(
    """
    import sys, django
    django.setup()
    from django.core.management import call_command
    from django_jobs.backends import outbox
    from django_jobs.broker.protocol import Accepted
    from testproject.probes.jobs import Tally, Work

    call_command("migrate", verbosity=0, interactive=False)
    outbox.OutboxBackend.submit = lambda self, s: [Accepted(outbox.OUTBOXED)] * len(s)
    Tally.enqueue_many([Work(f"t{i}") for i in range(int(sys.argv[1]))], outbox=True)
    """
)


def test_outbox__two_workers_on_sqlite_relay_one_at_a_time_and_run_each_job_once(
    redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.sqlite3'}"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="testproject.settings", DATABASE_URL=url, REDIS_URL=redis_ns.url,
        JOBS_NAMESPACE=redis_ns.namespace, JOBS_EXTRA=json.dumps({"OUTBOX": True}),
    )  # fmt: skip
    subprocess.run(
        [sys.executable, "-c", BACKLOG, "3000"], cwd=ROOT, env=env, check=True, timeout=120
    )
    workers = [
        Worker(redis_ns.url, redis_ns.namespace, tmp_path / f"w{i}.log", url).start(
            "--concurrency", "2", OUTBOX=True
        )
        for i in range(2)
    ]
    try:
        wait_until(
            lambda: sum(tally(redis_ns).values()) >= 3000, timeout=60, interval=0.2,
            why=lambda: workers[0].output()[-3000:],
        )  # fmt: skip
    finally:
        for w in workers:
            w.kill()
    runs = tally(redis_ns)
    assert len(runs) == 3000
    assert set(runs.values()) == {1}
    relayed = [sum(map(int, RELAYED.findall(w.output()))) for w in workers]
    assert sum(relayed) == 3000, relayed  # one relay at a time: nothing sent twice
    assert not any("database is locked" in w.output() for w in workers)


def test_outbox__a_worker_stopped_gracefully_on_sqlite_gives_back_the_relay_lease(
    redis_ns: RedisNamespace, tmp_path: Path
) -> None:
    path = tmp_path / "outbox.sqlite3"
    url = f"sqlite:///{path}"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="testproject.settings", DATABASE_URL=url, REDIS_URL=redis_ns.url,
        JOBS_NAMESPACE=redis_ns.namespace, JOBS_EXTRA=json.dumps({"OUTBOX": True}),
    )  # fmt: skip
    subprocess.run([sys.executable, "-c", BACKLOG, "3"], cwd=ROOT, env=env, check=True, timeout=60)
    worker = Worker(redis_ns.url, redis_ns.namespace, tmp_path / "w.log", url).start(OUTBOX=True)

    def holder() -> str:
        with closing(sqlite3.connect(path)) as db:
            found = db.execute(
                f"SELECT holder FROM {OutboxRelay._meta.db_table} WHERE name = 'relay'"
            ).fetchone()
        return "" if found is None else str(found[0])

    try:
        wait_until(lambda: sum(tally(redis_ns).values()) >= 3, timeout=30, why=worker.output)
        assert holder()  # it relayed, so it holds the lease
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()[-3000:]
    finally:
        worker.kill()
    assert holder() == ""  # the next worker relays at once, not 10 s later
