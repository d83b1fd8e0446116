"""Scenario 7: bad input. Each ends as a clear error or a dead task with a readable reason, and
the worker keeps serving.

- Task records written straight into Redis: not JSON, not UTF-8, missing, from a newer release.
- A task of a job type no worker knows (UNKNOWN_JOB_GRACE shortened): bounced, then dead.
- A payload of the wrong shape for its job: dead at once, nothing run.
- An oversized payload: refused at enqueue with PayloadTooLarge, nothing written.
- An exception with a 1 MB message: dead with a bounded error line and traceback.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from django_jobs.exceptions import PayloadTooLarge
from testproject.probes.jobs import Chaos, ChaosWork
from tests.chaos.harness import Run, Stage
from tests.chaos.processes import wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude

CONCURRENCY = 2
UNKNOWN_JOB_GRACE = 3
UNKNOWN_JOB_DELAY = 1
#: The longest error line and traceback a dead task may keep to stay readable, in characters.
READABLE_ERROR = 2_000
READABLE_TRACEBACK = 64_000
HUGE_MESSAGE = 1_000_000


def message(task_id: str, **fields: Any) -> str:
    """A task record's `msg` as enqueue would write it, with fields overridden."""
    body = {
        "v": 1,
        "id": task_id,
        "job": Chaos.name,
        "queue": "default",
        "payload": {"n": -1},
        "max_attempts": 1,
        "timeout": 60,
        "retention": 3600,
        "idempotency_key": None,
        **fields,
    }
    return json.dumps(body)


def plant(stage: Stage, msg: str | bytes | None, task_id: str = "") -> str:
    """Write a pending task straight into Redis (msg None: only the id, no record)."""
    task_id = task_id or uuid.uuid4().hex
    pipe = stage.client.pipeline(transaction=False)
    if msg is not None:
        record: dict[str, str | bytes | int] = {"state": "pending", "msg": msg}
        record.update(attempts=0, crashes=0, epoch=0)
        pipe.hset(stage.key("default", f"t:{task_id}"), mapping=record)  # type: ignore[arg-type]
    pipe.lpush(stage.key("default", "pending"), task_id)
    pipe.lpush(stage.key("default", "wake"), "1")
    pipe.execute()
    return task_id


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "bad input written -> its task dead"
    extra = {"UNKNOWN_JOB_GRACE": UNKNOWN_JOB_GRACE, "UNKNOWN_JOB_DELAY": UNKNOWN_JOB_DELAY}
    with run.stage("bad-input", **extra) as stage:
        (worker,) = stage.start_workers(1, CONCURRENCY)
        written = time.time()
        # name -> (task id, what its error must say)
        cases: dict[str, tuple[str, str]] = {}
        records: list[tuple[str, str | bytes | None, str]] = [
            ("not JSON", "{not json", "is not valid JSON"),
            ("not UTF-8", b"\xff\xfe\x00{", "could not decode the task record"),
            ("no record", None, "record evicted: only the task's id was left"),
            ("newer release", json.dumps({"v": 4, "id": "x"}), "has version 4"),
        ]
        for name, msg, says in records:
            task_id = plant(stage, msg)
            cases[f"record {name}"] = (task_id, says)
        task_id = uuid.uuid4().hex
        plant(stage, message(task_id, job="chaos.NoSuchJob"), task_id)
        cases["unknown job type"] = (task_id, "unknown job type 'chaos.NoSuchJob'")
        task_id = uuid.uuid4().hex
        plant(stage, message(task_id, payload={"n": 1, "colour": "red"}), task_id)
        cases["payload of the wrong shape"] = (task_id, "the payload does not match ChaosWork")
        (huge,) = stage.enqueue(
            1, lambda n: ChaosWork(n, fail="raise", message_size=HUGE_MESSAGE), max_attempts=1
        )
        stage.ledger.expect_dead.add(huge)
        cases["1 MB exception message"] = (huge, "RuntimeError: poison")

        pending_before = stage.client.llen(stage.key("default", "pending"))
        try:
            stage.enqueue(1, lambda n: ChaosWork(n, fail="x" * 100_000))
            result.problems.append("an oversized payload was accepted")
        except PayloadTooLarge as exc:
            result.note(f"oversized payload refused at enqueue: {str(exc)[:80]}...")
        result.expect(
            stage.client.llen(stage.key("default", "pending")) <= pending_before,
            "the oversized payload was written anyway",
        )

        def dead_at() -> dict[str, float]:
            found = {}
            for name, (task_id, _) in cases.items():
                key = stage.key("default", f"t:{task_id}")
                state, died = stage.client.hmget(key, ["state", "died_at"])
                if state != "dead":
                    return {}
                found[name] = float(died or 0)
            return found

        died = wait_until(dead_at, 4 * UNKNOWN_JOB_GRACE + 30, "every bad task dead", 0.2)
        result.recovery = [max(0.0, t - written) for t in died.values()]
        for name, (task_id, says) in cases.items():
            key = stage.key("default", f"t:{task_id}")
            error, tb = stage.client.hmget(key, ["error", "traceback"])
            error, tb = error or "", tb or ""
            result.expect(says in error, f"{name}: the reason does not say {says!r}: {error!r}")
            result.expect(
                len(error) <= READABLE_ERROR,
                f"{name}: unreadable reason ({len(error)} chars): {error[:200]!r}",
            )
            result.expect(
                len(tb) <= READABLE_TRACEBACK,
                f"{name}: a traceback of {len(tb)} characters was kept",
            )
            result.note(f"{name}: dead after {died[name] - written:.1f}s: {error[:90]!s}")
        _, tb = stage.client.hmget(stage.key("default", f"t:{huge}"), ["error", "traceback"])
        result.expect(
            "in run\n" in (tb or ""), "the 1 MB message pushed the stack out of the traceback"
        )

        # And the worker keeps serving
        stage.enqueue(20)
        conclude(stage, result, drain=30)
        result.faults = len(cases) + 1
        result.expect(worker.alive, f"the worker died:\n{worker.tail()}")
