"""once() in a real worker: a handler killed after its block committed does not redo the effect.

Runs on the suite's database: with DATABASE_URL=postgres the worker uses the test database
itself; on SQLite it uses a migrated file of its own (an in-memory test database cannot be
shared with another process).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from testproject.probes.jobs import OnceEffect, Work
from testproject.probes.models import Effect
from tests.acceptance.conftest import FAST, ROOT, Worker, done, probe
from tests.conftest import RedisNamespace, wait_until


class DatabaseWorker(Worker):
    """A runworker on a database of the test's choosing (Worker always takes a SQLite file)."""

    def __init__(self, url: str, namespace: str, log: Path, database_url: str) -> None:
        super().__init__(url, namespace, log)
        self.database_url = database_url

    def env(self, **jobs: Any) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            REDIS_URL=self.url,
            JOBS_NAMESPACE=self.namespace,
            JOBS_EXTRA=json.dumps({**FAST, **jobs}),
            DATABASE_URL=self.database_url,
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, *args: str, **jobs: Any) -> Worker:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", *args],
                cwd=ROOT, env=self.env(**jobs), stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self


def _postgres_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def db_worker(
    redis_ns: RedisNamespace, tmp_path: Path, transactional_db: None
) -> Iterator[DatabaseWorker]:
    if connection.vendor == "postgresql":
        url = _postgres_url()
    else:
        url = f"sqlite:///{tmp_path / 'worker.sqlite3'}"
    worker = DatabaseWorker(redis_ns.url, redis_ns.namespace, tmp_path / "worker.log", url)
    if connection.vendor != "postgresql":
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
            cwd=ROOT, env=worker.env(), check=True,
        )  # fmt: skip
    yield worker
    worker.kill()


def effects(worker: DatabaseWorker, tag: str) -> int:
    if connection.vendor == "postgresql":
        return Effect.objects.filter(key=tag).count()
    path = worker.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        (count,) = db.execute("SELECT count(*) FROM probes_effect WHERE key = ?", [tag]).fetchone()
    return int(count)


def test_once__killed_after_its_block_committed_the_effect_exists_once(
    db_worker: DatabaseWorker, redis_ns: RedisNamespace
) -> None:
    db_worker.start("--concurrency", "1")
    OnceEffect.enqueue(Work(tag="charge"))

    wait_until(lambda: done(redis_ns), timeout=30, why=db_worker.output)

    runs = [r.decode() for r in redis_ns.client.lrange(probe(redis_ns, "runs"), 0, -1)]
    # The first run committed its block and was killed (kill -9) before the ack; the next run
    # found the key: it yielded False and wrote nothing. The crash did not spend an attempt.
    assert runs == ["charge:1:1", "charge:1:0"], db_worker.output()
    assert done(redis_ns) == ["charge:1:1"]
    assert effects(db_worker, "charge") == 1
    db_worker.signal(signal.SIGTERM)
    assert db_worker.wait() == 0
