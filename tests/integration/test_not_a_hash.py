"""A task record that is not a hash (written by hand or by another program in our namespace)
sends its task to dead with a reason on every path that meets it, instead of stranding it: the
settle path (ack_dequeue: the ack of the task before, then the fetch), and a give-back after a
lost reply (broker/receipts.py), which leaves it to the recoverer. The plain dequeue and recover
paths: tests/integration/test_scripts_flow.py."""

from __future__ import annotations

from django_jobs.client import get_broker
from tests.conftest import RedisNamespace
from tests.integration.test_broker import request, verdict
from tests.integration.test_scripts_atomic import key
from tests.redis_state import q, snapshot, t


def test_settle__the_next_task_whose_record_is_not_a_hash_goes_dead_and_the_one_after_runs(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    broker.enqueue([request("a"), request("b"), request("c")])
    first = broker.dequeue(["default"])
    assert first is not None
    redis_ns.client.delete(key(redis_ns, t("b")))
    redis_ns.client.set(key(redis_ns, t("b")), "written by hand")

    written, fetched = broker.settle([verdict("ack", retention=60)], ["default"], 1)

    assert written == [True]
    assert [d.id for d in fetched] == ["c"]
    snap = snapshot(redis_ns)
    assert snap[q("dead")] == ("zset", [("b", "now")])
    assert snap[q("active")] == ("list", ["c"])
    assert "was a string, not a hash" in snap[t("b")][1]["error"]


def test_give_back__a_record_that_is_not_a_hash_is_left_for_the_recoverer(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    broker.enqueue([request("a"), request("b")])
    got = broker.dequeue_many(["default"], 2)
    assert [d.id for d in got] == ["a", "b"]
    receipt = redis_ns.client.hget(key(redis_ns, t("a")), "receipt")
    assert isinstance(receipt, bytes)
    redis_ns.client.delete(key(redis_ns, t("b")))
    redis_ns.client.set(key(redis_ns, t("b")), "written by hand")
    name, keys, args = broker._give_back_call("default", receipt.decode())

    assert broker._run(name, keys, args) == 1

    # a went back; b stays in active with its lease, for recover to bury (tested there).
    snap = snapshot(redis_ns)
    assert snap[q("pending")] == ("list", ["a"])
    assert snap[q("active")] == ("list", ["b"])
    assert snap[t("a")][1]["state"] == "pending"
