"""An atomic step on a real worker: killed (kill -9) after its transaction committed and before
Redis heard of it, its database effect still happens once.

PostgreSQL on the legs with DATABASE_URL=postgres (the worker uses the test database itself),
else a migrated SQLite file of the worker's own (test_once_worker's DatabaseWorker).
"""

from __future__ import annotations

import signal

from django_jobs.flows import get_run
from testproject.shop.people import AtomicCharge, Charge
from tests.acceptance.test_once_worker import DatabaseWorker, db_worker, effects
from tests.conftest import RedisNamespace, wait_until

__all__ = ["db_worker"]  # the fixture, shared with test_once_worker

FLOWS = {"LEASE": 2, "HEARTBEAT_INTERVAL": 0.5, "RECOVERER_INTERVAL": 0.5,
         "FLOW_REPLAY_LEASE": 2, "FLOW_REPLAY_RENEW": 0.5}  # fmt: skip


def test_atomic_step__killed_after_its_commit_writes_once(
    db_worker: DatabaseWorker, redis_ns: RedisNamespace
) -> None:
    db_worker.start("--concurrency", "1", **FLOWS)
    call = AtomicCharge.start(Charge(tag="atomic"), metadata={"kill_after_commit": True})

    def ended() -> bool:
        run = get_run(call)
        return run is not None and run.status in ("succeeded", "failed")

    wait_until(ended, timeout=60, why=db_worker.output)

    killed = redis_ns.client.hget(f"{redis_ns.namespace}:probe:killed-after-commit", call)
    assert killed is not None, "the test hook never killed the worker after the commit"
    runs = redis_ns.client.lrange(f"{redis_ns.namespace}:probe:atomic-runs", 0, -1)
    run = get_run(call)
    assert run is not None
    assert (run.status, run.output) == ("succeeded", "atomic-written"), run.error
    assert len(runs) == 1, runs  # the step's function ran once: the replay took its value
    assert effects(db_worker, "atomic") == 1
    step = run.step("charge")
    assert step is not None
    assert step.state == "done"
    db_worker.signal(signal.SIGTERM)
    assert db_worker.wait() == 0
