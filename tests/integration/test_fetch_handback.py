"""A fetch over several queues takes tasks round by round (broker/fetch.py); when a later round
fails, or hands a task back and that hand-back is refused, what it took must not wait in active
until its lease expires (then recovered as a crash, one step nearer dead, though it never ran):
it goes back to pending at once, no attempt and no crash spent. Real Redis; the fault is the
broker's round trip failing or refusing on the round the test names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.exceptions import MovedError, ResponseError, TryAgainError

from django_jobs.broker.cluster import PartlyAnswered
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.keys import QueueKeys
from tests.conftest import RedisNamespace
from tests.integration.test_broker import request
from tests.integration.test_limits import Hourly, Item, limited_broker, window_of


def _broker() -> RedisBroker:
    broker = get_broker()
    assert isinstance(broker, RedisBroker)
    return broker


def _fault_on(
    monkeypatch: pytest.MonkeyPatch,
    broker: RedisBroker,
    which: int,
    fault: Callable[[Callable[..., list[Any]], list[Any], dict[str, Any]], list[Any]],
) -> None:
    """Make the broker's `which`-th round trip go through fault(real, commands, kwargs)."""
    calls = {"n": 0}
    real = broker._round_trip

    def flaky(commands: Any, **kwargs: Any) -> list[Any]:
        calls["n"] += 1
        if calls["n"] == which:
            return fault(real, list(commands), kwargs)
        return real(commands, **kwargs)

    monkeypatch.setattr(broker, "_round_trip", flaky)


def _where(redis_ns: RedisNamespace, queue: str, task_id: str) -> tuple[list[str], bytes | None]:
    k = QueueKeys(redis_ns.namespace, queue)
    active = [i.decode() for i in redis_ns.client.lrange(k.active, 0, -1)]
    return active, redis_ns.client.hget(k.task(task_id), "state")


@pytest.mark.parametrize("how", ["connection", "refused"])
def test_fetch__a_later_round_failing_gives_back_what_the_first_took(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    broker = _broker()
    broker.enqueue([request("a1", queue="a"), request("b1", queue="b")])

    def round_1(real: Callable[..., list[Any]], commands: list[Any], kw: dict[str, Any]) -> Any:
        if how == "connection":  # the dequeue of queue b: the node is gone
            raise redis.ConnectionError("node gone after the write")
        replies = real(commands[:-1], **kw)  # the dequeue of b refused: it did not run
        return [*replies, ResponseError("TRYAGAIN Multiple keys request during rehashing")]

    _fault_on(monkeypatch, broker, 2, round_1)
    with pytest.raises(BrokerUnavailable):
        broker.dequeue_many(["a", "b"], 2)
    # a1 was taken in the first round: it is back in pending, nothing spent.
    assert _where(redis_ns, "a", "a1") == ([], b"pending")
    k = QueueKeys(redis_ns.namespace, "a")
    counts = redis_ns.client.hmget(k.task("a1"), "attempts", "crashes")
    assert [int(c or 0) for c in counts] == [0, 0]
    monkeypatch.undo()
    assert [d.id for d in broker.dequeue_many(["a", "b"], 2)] == ["a1", "b1"]


def test_fetch__a_refused_hand_back_is_given_back_again(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = _broker()
    broker._leads[("a", "b")] = 1  # the last task came from b: b leads
    broker.enqueue([request("a1", queue="a"), request("b1", queue="b")])

    def round_1(real: Callable[..., list[Any]], commands: list[Any], kw: dict[str, Any]) -> Any:
        # b1 is handed back (a, before b, has a task ready): that requeue is refused.
        assert commands[0][:2] == ("EVALSHA", broker.scripts["requeue"].sha)
        replies = real(commands[1:], **kw)
        return [ResponseError("OOM command not allowed when used memory > 'maxmemory'"), *replies]

    _fault_on(monkeypatch, broker, 2, round_1)
    assert [d.id for d in broker.dequeue_many(["a", "b"], 1)] == ["a1"]
    assert _where(redis_ns, "b", "b1") == ([], b"pending")


@pytest.mark.parametrize("queues", [["a"], ["a", "b"]])
def test_fetch__a_dequeue_answered_beside_a_node_that_failed_gives_its_tasks_back(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch, queues: list[str]
) -> None:
    # On a Cluster the round trip's commands go to several nodes: the dequeue's node answered,
    # another failed after the write (the wire raises PartlyAnswered with what was read).
    broker = _broker()
    broker.enqueue([request("a1", queue="a")])

    def other_node_lost(real: Callable[..., list[Any]], commands: list[Any], kw: Any) -> Any:
        replies = real(commands, **kw)
        raise PartlyAnswered(redis.ConnectionError("node gone"), replies)

    _fault_on(monkeypatch, broker, 1, other_node_lost)
    with pytest.raises(BrokerUnavailable):
        broker.dequeue_many(queues, 1)
    assert _where(redis_ns, "a", "a1") == ([], b"pending")


def test_fetch__a_lost_reply_given_back_gives_its_rate_start_back(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hourly may start 3 times an hour: three fetches whose replies were lost (the task given
    # back by its receipt, never run) must not spend the hour's budget.
    broker = limited_broker()
    k = QueueKeys(redis_ns.namespace, "default")
    window = window_of(redis_ns, 3600)
    task = Hourly.enqueue(Item(0)).id

    def reply_lost(real: Callable[..., list[Any]], commands: list[Any], kw: Any) -> Any:
        real(commands, **kw)
        raise redis.ConnectionError("connection lost after the write")

    for _ in range(3):
        _fault_on(monkeypatch, broker, 1, reply_lost)
        with pytest.raises(BrokerUnavailable):
            broker.dequeue_many(["default"], 1)
        monkeypatch.undo()
        assert broker.give_back_unsure() == 1  # (a stopping child's last call)
    assert window_of(redis_ns, 3600) == window  # (an hour turning would void the test)
    assert redis_ns.client.hget(k.rate("limits.Hourly"), "started") in (None, b"0")
    assert [d.id for d in broker.dequeue_many(["default"], 1)] == [task]


@pytest.mark.parametrize(
    "refusal",
    [
        TryAgainError("Multiple keys request during rehashing of slot"),
        MovedError("3999 127.0.0.1:6381"),
        ResponseError("BUSY Redis is busy running a script."),
    ],
)
def test_give_back__refused_while_a_slot_moves_is_tried_again(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch, refusal: ResponseError
) -> None:
    # A give-back refused before it ran (its slot moving, a script busy) keeps its receipt: the
    # next try gives the task back, instead of it waiting out its lease, then counted a crash.
    broker = _broker()
    broker.enqueue([request("a1", queue="a")])

    def reply_lost(real: Callable[..., list[Any]], commands: list[Any], kw: Any) -> Any:
        real(commands, **kw)
        raise redis.ConnectionError("connection lost after the write")

    _fault_on(monkeypatch, broker, 1, reply_lost)
    with pytest.raises(BrokerUnavailable):
        broker.dequeue_many(["a"], 1)
    _fault_on(monkeypatch, broker, 1, lambda real, commands, kw: [refusal for _ in commands])
    assert broker.give_back_unsure() == 0
    # The next fetch's give-back is refused again, and that fetch's own reply is lost too.
    calls = {"n": 0}
    real = broker._round_trip

    def refused_then_lost(commands: Any, **kw: Any) -> list[Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            return [refusal for _ in commands]
        return reply_lost(real, list(commands), kw)

    monkeypatch.setattr(broker, "_round_trip", refused_then_lost)
    with pytest.raises(BrokerUnavailable):
        broker.dequeue_many(["a"], 1)
    monkeypatch.undo()
    assert broker.give_back_unsure() == 1
    assert _where(redis_ns, "a", "a1") == ([], b"pending")
    k = QueueKeys(redis_ns.namespace, "a")
    assert redis_ns.client.hget(k.task("a1"), "crashes") in (None, b"0")
