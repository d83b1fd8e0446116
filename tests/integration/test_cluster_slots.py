"""Every call on one Redis Cluster slot (issue 20): every script of the broker, and every
multi-key command and MULTI transaction it sends, names keys of one slot only, in every mode.

The test runs each script (and the broker calls around them: a fetch over three queues, an
outcome with the next fetch, the background loops, the registry, schedules, flows, the
operator's actions) under tests/cluster_audit.py's recorder and fails on any call whose keys
hash to more than one slot, naming it. It also fails when a script of broker/lua is not run
here: a new script gets a line in `scenario` (its public broker call), so that it is audited.

Left out, by design: one server's idle wait, a single BLPOP on the wake keys of every queue
served (a blocking command, not a script; a Cluster child blocks on each queue's wake key on a
connection of its own, broker/cluster_wait.py, which tests/integration/cluster/ runs).
"""

from __future__ import annotations

from typing import Any

from django_jobs.broker import scripts
from django_jobs.broker.flows import FlowStore
from django_jobs.broker.protocol import Action, EnqueueRequest, Verdict
from django_jobs.client import get_broker
from django_jobs.keys import State
from tests.cluster_audit import recording
from tests.conftest import RedisNamespace

QUEUES = ["critical", "default", "low"]


def request(task_id: str, queue: str = "default", key: str | None = None) -> EnqueueRequest:
    return EnqueueRequest(task_id, queue, '{"v":1}', idempotency_key=key, idempotency_window=60)


def verdict(delivery: Any, action: str, **fields: Any) -> Verdict:
    return Verdict(delivery.id, delivery.queue, delivery.epoch, "", Action(action), **fields)


def scenario(broker: Any, ns: RedisNamespace) -> None:
    """Every script once at least, through the broker's own calls."""
    k = broker.keys("default")
    home = f"{ns.namespace}:{{low}}:idem:probe:k"  # a key homed on another queue: a hand-off
    broker.enqueue([request("a")])
    broker.enqueue([request("b"), request("c")])  # enqueue_many
    broker.enqueue([request("d", key=k.idempotency("probe", "one"))])
    broker.enqueue([request("e", key=home)])  # handoff, enqueue, handoff_done
    broker.finish_handoffs("low", grace=0)  # handoff_due
    broker.enqueue([request("x1", "low"), request("x2", "low")])
    broker.enqueue([request("c1", "critical")])
    # A fetch over three queues, and outcomes with the next fetch.
    first = broker.dequeue_many(QUEUES, 1)  # critical's task
    _, (second,) = broker.settle([verdict(first[0], "ack", retention=60)], QUEUES, 1)
    _, (third,) = broker.settle([verdict(second, "ack", retention=60)], QUEUES, 1)  # ack_dequeue
    _, (fourth,) = broker.settle(
        [verdict(third, "retry", delay=0, error="E", traceback="")], QUEUES, 1
    )
    broker.kill(fourth, "E", "")
    (fifth,) = broker.dequeue_many(QUEUES, 1)
    broker.extend_leases(fifth.queue, [(fifth.id, fifth.epoch)])
    broker.requeue(fifth, crash=True)
    broker.wait_and_fetch(["default"], 0.01)
    broker._unsure = [("default", "a receipt whose reply was lost")]  # (broker/receipts.py)
    broker.give_back_unsure()  # give_back
    broker.forward("default")
    (sixth,) = broker.dequeue_many(QUEUES, 1)
    ns.client.zadd(broker.keys(sixth.queue).lease, {sixth.id: 1})  # its lease expired
    broker.recover(sixth.queue)
    broker.janitor("default")
    # The registry.
    broker.beat("w1", {"host": "h", "pid": 1}, 10)
    broker.workers()
    broker.unregister("w1")
    # The read side and the operator's actions.
    broker.queue_infos(QUEUES)
    dead = broker.state_ids("default", State.DEAD, 0, 10)[1]
    broker.task_infos("default", dead)  # read_fields
    broker.run_now("default", dead[0], State.DEAD)
    (seventh,) = broker.dequeue_many(QUEUES, 1)
    broker.ack(seventh, 60)
    broker.delete(seventh.queue, seventh.id, State.COMPLETED, None)
    ns.client.hset(broker.keys("default").task("broken"), "x", "1")
    broker.discard("default", "broken")
    broker.pause("low")
    broker.resume("low")
    # Cancel: a waiting task, then a running one (marked, renewed, ended canceled).
    broker.enqueue([request("w1"), request("w2")])
    broker.cancel("default", "w1")
    (eighth,) = broker.dequeue_many(["default"], 1)
    broker.cancel(eighth.queue, eighth.id)
    broker.renew_leases(eighth.queue, [(eighth.id, eighth.epoch)])
    broker.end_canceled(eighth, "JobCanceled: x", "")
    # Schedules.
    tick = request("s1", key=k.idempotency("probe", "schedule:tick:100.0"))
    broker.fire("tick", tick, 100.0, 10)
    broker.skip_fire("tick", 200.0)
    broker.schedule_states(["tick"])
    broker.fire_history("tick", 10)
    broker.pause_schedule("tick")
    broker.resume_schedule("tick")
    broker.forget_schedules([])
    # Flows.
    store = FlowStore(broker)
    store.start("call1", "flow", "{}", "{}", "key1")
    acquired = store.acquire("call1")
    (event,) = broker.enqueue([request("ev")]) and broker.dequeue_many(["default"], 1)
    store.write("call1", acquired.epoch, "keep", status={"s": "{}"}, task=("default", event.id))
    store.renew([event])
    store.signal("call1", "go", "1")
    store.cancel("call1", "enough")
    store.read(["call1"])
    store.forget("flow", ["call1"])


def test_every_broker_call__names_keys_of_one_cluster_slot(redis_ns: RedisNamespace) -> None:
    broker = get_broker()

    with recording() as audit:
        scenario(broker, redis_ns)

    spanning = {name: found for name, found in audit.spanning().items() if name != "BLPOP"}
    assert spanning == {}, "calls whose keys are on several Redis Cluster slots:\n" + "\n".join(
        f"{name}: {spans} of {calls}, e.g. {example}"
        for name, (calls, spans, example) in spanning.items()
    )
    missed = sorted(set(scripts.SOURCES) - set(audit.seen))
    assert missed == [], f"scripts this audit does not run: {missed} (add them to scenario())"
