"""Job.atomic in a real worker: a child killed (kill -9) inside run() commits nothing, and the
next delivery succeeds once. On the suite's database (see test_once_worker.py): PostgreSQL with
DATABASE_URL=postgres://..., else a migrated SQLite file of the worker's own."""

from __future__ import annotations

import signal

from testproject.probes.jobs import AtomicCrash, Work
from tests.acceptance.conftest import done, probe
from tests.acceptance.test_once_worker import DatabaseWorker, effects
from tests.acceptance.test_once_worker import db_worker as db_worker  # the fixture
from tests.conftest import RedisNamespace, wait_until


def test_atomic__killed_inside_run_leaves_nothing_and_succeeds_once_on_the_next_delivery(
    db_worker: DatabaseWorker, redis_ns: RedisNamespace
) -> None:
    # Given an atomic job whose first run writes its row and is killed before it returns
    db_worker.start("--concurrency", "1")
    AtomicCrash.enqueue(Work(tag="atomic"))

    wait_until(lambda: done(redis_ns), timeout=30, why=db_worker.output)

    # Then the killed run wrote nothing: the row is the second run's, the only one
    runs = [r.decode() for r in redis_ns.client.lrange(probe(redis_ns, "runs"), 0, -1)]
    assert runs == ["atomic:1:0", "atomic:1:1"], db_worker.output()
    assert done(redis_ns) == ["atomic:1:1"]
    # (run() pushes "done" before the atomic block commits: wait for the commit, then count)
    wait_until(lambda: effects(db_worker, "atomic"), timeout=10, why=db_worker.output)
    assert effects(db_worker, "atomic") == 1
    db_worker.signal(signal.SIGTERM)
    assert db_worker.wait() == 0
