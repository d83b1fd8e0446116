"""Every sweeper as a table (asynq's recoverer_test.go manner): tasks in a state before, one tick
of the component, where each task is after. On the real Redis; "Redis unavailable" is a broker
pointed at a port nothing listens on; garbage is written into the records by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_jobs.broker.factory import connect
from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.worker.forwarder import Forwarder
from django_jobs.worker.heartbeat import Heartbeat
from django_jobs.worker.janitor import Janitor
from django_jobs.worker.loop import Component
from django_jobs.worker.recoverer import Recoverer
from tests.conftest import RedisNamespace, free_port
from tests.integration.test_heartbeat import Idle, Nothing

pytestmark = pytest.mark.django_db(transaction=True)  # the janitor prunes the database first

Q = "default"
#: A score long past, for a due time or a lease that has expired.
PAST = 1.0


def where(ns: RedisNamespace) -> dict[str, str]:
    """Each task id of queue Q -> the structure that holds it."""
    k = get_broker().keys(Q)
    out: dict[str, str] = {}
    for name, key in [("pending", k.pending), ("active", k.active)]:
        for raw in ns.client.lrange(key, 0, -1):
            out[raw.decode()] = name
    for name, key in [("scheduled", k.scheduled), ("retry", k.retry), ("dead", k.dead),
                      ("completed", k.completed)]:  # fmt: skip
        for raw in ns.client.zrange(key, 0, -1):
            out[raw.decode()] = name
    return out


def field(task_id: str, name: str) -> str | None:
    raw = get_broker().client.hget(get_broker().keys(Q).task(task_id), name)
    return None if raw is None else str(raw)


# -- ways to put one task in a state before the tick (each returns its id) ----------------------


def pending() -> str:
    return Idle.enqueue(Nothing()).id


def scheduled(due: float) -> Callable[[], str]:
    def make() -> str:
        task_id = Idle.enqueue(Nothing(), delay=3600).id
        if due:
            get_broker().client.zadd(get_broker().keys(Q).scheduled, {task_id: due})
        return task_id

    return make


def active(lease: float | None = None, crashes: int = 0) -> Callable[[], str]:
    def make() -> str:
        broker = get_broker()
        task_id = Idle.enqueue(Nothing()).id
        delivery = broker.dequeue([Q])
        assert delivery is not None
        assert delivery.id == task_id
        if crashes:
            broker.client.hset(broker.keys(Q).task(task_id), "crashes", crashes)
        if lease is not None:
            broker.client.zadd(broker.keys(Q).lease, {task_id: lease})
        return task_id

    return make


def retry(delay: float) -> Callable[[], str]:
    def make() -> str:
        broker = get_broker()
        task_id = Idle.enqueue(Nothing()).id
        delivery = broker.dequeue([Q])
        assert delivery is not None
        assert broker.retry(delivery, delay, "ValueError: boom", "")
        return task_id

    return make


def completed(expires: float | None) -> Callable[[], str]:
    def make() -> str:
        broker = get_broker()
        task_id = Idle.enqueue(Nothing()).id
        delivery = broker.dequeue([Q])
        assert delivery is not None
        assert broker.ack(delivery, 3600)
        if expires is not None:
            broker.client.zadd(broker.keys(Q).completed, {task_id: expires})
        return task_id

    return make


def dead() -> str:
    broker = get_broker()
    task_id = Idle.enqueue(Nothing()).id
    delivery = broker.dequeue([Q])
    assert delivery is not None
    assert broker.kill(delivery, "ValueError: boom", "")
    return task_id


def garbage(make: Callable[[], str], **fields: str) -> Callable[[], str]:
    """A task made by make whose record then gets these fields written by hand."""

    def made() -> str:
        task_id = make()
        get_broker().client.hset(get_broker().keys(Q).task(task_id), mapping=fields)
        return task_id

    return made


def not_a_hash(make: Callable[[], str]) -> Callable[[], str]:
    """A task made by make whose record key then holds a string (a clumsy operator)."""

    def made() -> str:
        task_id = make()
        key = get_broker().keys(Q).task(task_id)
        get_broker().client.delete(key)
        get_broker().client.set(key, "not a record")
        return task_id

    return made


# -- the components, built on a broker (given the ids of the tasks made before) ----------------

Build = Callable[[RedisBroker, dict[str, str]], Component]


def forwarder(broker: RedisBroker, ids: dict[str, str]) -> Component:
    return Forwarder(broker, [Q])


def recoverer(broker: RedisBroker, ids: dict[str, str]) -> Component:
    return Recoverer(broker, [Q])


def janitor(broker: RedisBroker, ids: dict[str, str]) -> Component:
    return Janitor(broker, [Q])


def heartbeat(broker: RedisBroker, ids: dict[str, str]) -> Component:
    """A heartbeat whose worker runs the task called "held" (under the epoch it was given)."""
    held = Delivery(ids["held"], Q, b"", 0, 0, "1", None, None, 0.0)
    return Heartbeat(broker, "w1", {"host": "h"}, lambda: [held])


#: (case, component, tasks before by name, where each is after, fields checked after)
Row = tuple[str, Build, dict[str, Callable[[], str]], dict[str, str], dict[str, dict[str, Any]]]

TABLE: list[Row] = [
    (
        "forwarder: due scheduled and retry tasks move to pending, the rest stay",
        forwarder,
        {
            "due": scheduled(PAST),
            "later": scheduled(0),
            "retry due": retry(0),
            "retry later": retry(3600),
            "pending": pending,
        },
        {
            "due": "pending",
            "later": "scheduled",
            "retry due": "pending",
            "retry later": "retry",
            "pending": "pending",
        },
        {"due": {"state": "pending"}, "retry due": {"state": "pending", "attempts": "1"}},
    ),
    (
        "forwarder: a due task whose record has garbage counters still moves",
        forwarder,
        {"due": garbage(retry(0), attempts="lots", crashes="x")},
        {"due": "pending"},
        {"due": {"state": "pending", "attempts": "lots"}},
    ),
    (
        "recoverer: an expired lease goes back to pending, a crash counted; a live one stays",
        recoverer,
        {"expired": active(lease=PAST), "live": active()},
        {"expired": "pending", "live": "active"},
        {
            "expired": {"state": "pending", "crashes": "1", "epoch": "2"},
            "live": {"state": "active", "crashes": None},  # none counted
        },
    ),
    (
        "recoverer: an expired lease at the crash budget goes dead",
        recoverer,
        {"budget spent": active(lease=PAST, crashes=2)},
        {"budget spent": "dead"},
        {"budget spent": {"state": "dead", "crashes": "3"}},
    ),
    (
        "recoverer: an expired task whose record is not a hash is filed as dead",
        recoverer,
        {"broken": not_a_hash(active(lease=PAST))},
        {"broken": "dead"},
        {},
    ),
    (
        "recoverer: garbage crashes count as 0",
        recoverer,
        {"garbage": garbage(active(lease=PAST), crashes="x")},
        {"garbage": "pending"},
        {"garbage": {"state": "pending", "crashes": "1"}},
    ),
    (
        "janitor: completed past retention deleted, the rest kept",
        janitor,
        {"expired": completed(PAST), "kept": completed(None), "pending": pending},
        {"kept": "completed", "pending": "pending"},
        {"expired": {"state": None}, "kept": {"state": "completed"}},
    ),
    (
        "janitor: the dead set is trimmed to its newest DEAD_MAX_TASKS",
        janitor,
        {"older": dead, "newer": dead},
        {"newer": "dead"},
        {"older": {"state": None}, "newer": {"state": "dead"}},
    ),
    (
        "heartbeat: a held task's lease is renewed, another's is not",
        heartbeat,
        {"held": active(lease=PAST), "other": active(lease=PAST)},
        {"held": "active", "other": "active"},
        {"held": {"state": "active"}},
    ),
]


@pytest.mark.parametrize(("case", "build", "before", "after", "fields"), TABLE,
                         ids=[row[0].split(":")[0] + ": " + row[0].split(": ", 1)[1][:40]
                              for row in TABLE])  # fmt: skip
def test_sweeper__one_tick_takes_each_task_from_its_state_before_to_its_state_after(
    redis_ns: RedisNamespace,
    settings: Any,
    case: str,
    build: Build,
    before: dict[str, Callable[[], str]],
    after: dict[str, str],
    fields: dict[str, dict[str, str | None]],
) -> None:
    settings.JOBS = {**settings.JOBS, "MAX_CRASHES": 3, "DEAD_MAX_TASKS": 1}
    ids = {name: make() for name, make in before.items()}
    broker = get_broker()

    build(broker, ids).tick()

    names = {task_id: name for name, task_id in ids.items()}
    assert {names[task_id]: state for task_id, state in where(redis_ns).items()} == after
    for name, expected in fields.items():
        assert {f: field(ids[name], f) for f in expected} == expected, name
    if "held" in ids:
        lease = broker.keys(Q).lease
        assert (redis_ns.client.zscore(lease, ids["held"]) or 0) > 1_000_000_000
        assert redis_ns.client.zscore(lease, ids["other"]) == PAST


@pytest.mark.parametrize("build", [forwarder, recoverer, janitor, heartbeat],
                         ids=["forwarder", "recoverer", "janitor", "heartbeat"])  # fmt: skip
def test_sweeper__redis_unavailable_raises_broker_unavailable_and_changes_nothing(
    redis_ns: RedisNamespace, build: Build
) -> None:
    ids = {"held": active(lease=PAST)(), "due": scheduled(PAST)(), "done": completed(PAST)()}
    before = where(redis_ns)
    settings = get_broker().settings
    nowhere = RedisBroker(connect(f"redis://127.0.0.1:{free_port()}/0", 1), settings)
    component = build(nowhere, ids)

    with pytest.raises(BrokerUnavailable):
        component.tick()

    assert where(redis_ns) == before
