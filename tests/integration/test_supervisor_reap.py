"""The supervisor's reap and timeout paths as tables (asynq's recoverer_test.go manner): a task in
a state before, what happened to the child running it, the task's state after. On the real
Redis, with the supervisor's own methods (no fork: the "child" is a process of the test's)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_jobs.broker.factory import connect
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.worker.backlog import Backlog
from django_jobs.worker.children import ChildProcess
from django_jobs.worker.slots import Running
from django_jobs.worker.supervisor import Supervisor
from tests.conftest import RedisNamespace, free_port
from tests.integration.test_heartbeat import Idle, Nothing

Q = "default"
KILLED = signal.SIGKILL  # a wait status: killed by SIGKILL
EXIT_1 = 1 << 8  # a wait status: exit code 1
TIMEOUT = 2.0


def running_task(attempt: int = 1, max_attempts: int = 3, **fields: Any) -> Running:
    """A task dequeued (active), as its child would publish it in the slot table."""
    broker = get_broker()
    Idle.enqueue(Nothing(), max_attempts=max_attempts)
    delivery = broker.dequeue([Q])
    assert delivery is not None
    if fields:
        broker.client.hset(broker.keys(Q).task(delivery.id), mapping=fields)
    return Running(delivery.id, 0, delivery.epoch, time.monotonic(), TIMEOUT, attempt,
                   max_attempts, 4.0)  # fmt: skip


def record(task_id: str) -> dict[str, str]:
    broker = get_broker()
    raw = broker.client.hgetall(broker.keys(Q).task(task_id))
    # A counter nothing counted yet is absent from the record, and reads as 0.
    counters = {k: raw.get(k, "0") for k in ("attempts", "crashes")}
    return {k: raw[k] for k in ("state", "error") if k in raw} | counters


def recovered_elsewhere(task: Running) -> None:
    """Another worker's recoverer took the task (its epoch moved on)."""
    broker = get_broker()
    broker.client.zadd(broker.keys(Q).lease, {task.task_id: 1})
    assert broker.recover(Q) == [(task.task_id, "pending")]


ERROR = f"JobTimeout: timed out after {TIMEOUT:g} s (killed after the grace period)"
DIED = "worker child 4242 died (killed by SIGKILL) while running it"
BURIED = f"crashed its worker 3 times: {DIED}"

#: (case, the run, the child's record, its wait status, done before, the task's record after)
Reap = tuple[
    str, dict[str, Any], dict[str, Any], int, Callable[[Running], None] | None, dict[str, str]
]

REAPS: list[Reap] = [
    (
        "died on its own: back to pending, a crash counted",
        {},
        {},
        KILLED,
        None,
        {"state": "pending", "attempts": "0", "crashes": "1"},
    ),
    (
        "exited non-zero: the same",
        {},
        {},
        EXIT_1,
        None,
        {"state": "pending", "attempts": "0", "crashes": "1"},
    ),
    (
        "died at the crash budget: dead",
        {"crashes": "2"},
        {},
        KILLED,
        None,
        {
            "state": "dead",
            "attempts": "0",
            "crashes": "3",
            "error": f"crashed its worker 3 times: {DIED}",
        },
    ),
    (
        "killed for its timeout, attempts left: retry, an attempt spent",
        {},
        {"killed_for_timeout": True},
        KILLED,
        None,
        {"state": "retry", "attempts": "1", "crashes": "0", "error": ERROR},
    ),
    (
        "killed for its timeout on the last attempt: dead",
        {"attempts": "2", "attempt": 3},
        {"killed_for_timeout": True},
        KILLED,
        None,
        {"state": "dead", "attempts": "3", "crashes": "0", "error": ERROR},
    ),
    (
        "killed for its timeout, garbage in the record: retry all the same (nothing is read)",
        {"attempts": "lots", "msg": "\xff not a message"},
        {"killed_for_timeout": True},
        KILLED,
        None,
        {"state": "retry", "attempts": "1", "crashes": "0", "error": ERROR},
    ),
    (
        "killed after losing its lease: nothing written",
        {},
        {"killed_for_lost": True},
        KILLED,
        None,
        {"state": "active", "attempts": "0", "crashes": "0"},
    ),
    (
        "died after its task was recovered elsewhere: stale, nothing written",
        {},
        {},
        KILLED,
        recovered_elsewhere,
        {"state": "pending", "attempts": "0", "crashes": "1"},
    ),
    (
        "timed out after its task was recovered elsewhere: stale",
        {},
        {"killed_for_timeout": True},
        KILLED,
        recovered_elsewhere,
        {"state": "pending", "attempts": "0", "crashes": "1"},
    ),
]


@pytest.mark.parametrize(("case", "run", "flags", "status", "meanwhile", "after"), REAPS,
                         ids=[row[0] for row in REAPS])  # fmt: skip
def test_child_died__writes_what_the_policy_decides(
    redis_ns: RedisNamespace,
    settings: Any,
    case: str,
    run: dict[str, Any],
    flags: dict[str, bool],
    status: int,
    meanwhile: Callable[[Running], None] | None,
    after: dict[str, str],
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_CRASHES": 3}
    attempt = run.pop("attempt", 1)
    task = running_task(attempt=attempt, **run)
    if meanwhile is not None:
        meanwhile(task)
    supervisor = Supervisor(get_broker(), [Q], 1)

    supervisor._child_died(ChildProcess(pid=4242, **flags), task, status)

    state = record(task.task_id)
    if "error" not in after:
        state.pop("error", None)
    assert state == after
    assert not supervisor.backlog.items


def test_child_died__redis_unavailable_keeps_the_decision_and_writes_it_once_redis_answers(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    task = running_task()
    settings = get_broker().settings
    nowhere = RedisBroker(connect(f"redis://127.0.0.1:{free_port()}/0", 1), settings)
    supervisor = Supervisor(nowhere, [Q], 1)

    # The reap does not raise (the worker keeps running) and writes nothing...
    supervisor._child_died(ChildProcess(pid=4242, killed_for_timeout=True), task, KILLED)

    assert record(task.task_id)["state"] == "active"
    assert [d.id for d, _, _ in supervisor.backlog.items] == [task.task_id]
    assert "could not write what becomes of it" in caplog.text
    # ...until Redis answers: the backlog's next tick writes the decision
    backlog = Backlog(get_broker())
    backlog.items = supervisor.backlog.items
    backlog.tick()
    assert record(task.task_id) == {"state": "retry", "attempts": "1", "crashes": "0",
                                    "error": ERROR}  # fmt: skip
    assert not backlog.items
    assert "now retry (written once Redis answered)" in caplog.text


# -- the timeout path ---------------------------------------------------------------------------


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for a child (the supervisor kills it, or not)."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


GRACE = 1.0
# (case, seconds since the run started, the child's record, killed?, flag set)
TIMEOUTS = [
    ("within its timeout", TIMEOUT - 0.5, {}, False, None),
    ("past its timeout, within the grace", TIMEOUT + GRACE - 0.5, {}, False, None),
    ("past its timeout and the grace: killed", TIMEOUT + GRACE + 0.5, {}, True,
     "killed_for_timeout"),
    ("lease lost, within the grace", 0.1, {"lost_ago": GRACE - 0.5}, False, None),
    ("lease lost, past the grace: killed", 0.1, {"lost_ago": GRACE + 0.5}, True,
     "killed_for_lost"),
    ("already killed for its timeout: not again", TIMEOUT + GRACE + 0.5,
     {"killed_for_timeout": True}, False, "killed_for_timeout"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "age", "flags", "kills", "flag"), TIMEOUTS,
                         ids=[row[0] for row in TIMEOUTS])  # fmt: skip
def test_enforce_timeouts__kills_a_child_past_its_timeout_or_its_lost_lease_plus_the_grace(
    redis_ns: RedisNamespace,
    settings: Any,
    child: subprocess.Popen[bytes],
    case: str,
    age: float,
    flags: dict[str, Any],
    kills: bool,
    flag: str | None,
) -> None:
    settings.JOBS = {**settings.JOBS, "TIMEOUT_GRACE": GRACE}
    supervisor = Supervisor(get_broker(), [Q], 1)
    now = time.monotonic()
    task = Running("t1", 0, "1", now - age, TIMEOUT, 1, 3, 4.0)
    supervisor.table.set(0, task)
    record_ = ChildProcess(pid=child.pid)
    lost_ago = flags.pop("lost_ago", None)
    if lost_ago is not None:
        record_.lost, record_.lost_at = task, now - lost_ago
    for name, value in flags.items():
        setattr(record_, name, value)
    supervisor.children = [record_]

    supervisor._enforce_timeouts()

    if kills:
        assert child.wait(timeout=5) == -signal.SIGKILL
    else:
        assert child.poll() is None
    if flag is not None:
        assert getattr(record_, flag)
