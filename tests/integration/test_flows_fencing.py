"""Fencing of flow replays, in this process: the epoch compare-and-set, the replay lease, and
its renewal by the supervisor's heartbeat."""

from __future__ import annotations

from typing import Any

from django_jobs.broker.factory import get_broker
from django_jobs.broker.flows import REPLAY_FIELD, FlowStore
from django_jobs.broker.protocol import Delivery
from django_jobs.conf import get_settings
from django_jobs.flows import Context, Flow, cancel, get_run
from django_jobs.worker.heartbeat import Heartbeat
from testproject.shop.flows import Steps, StepsFlow, Wait, WaitFlow
from tests.conftest import RedisNamespace


def delivery(task_id: str, queue: str) -> Delivery:
    return Delivery(task_id, queue, b"", 0, 0, "1", None, None, 0.0)


#: What the heartbeat's renewal answered during Hooked's hooks.
RENEWED: list[list[tuple[Delivery, str]]] = []


class Hooked(Flow[Steps]):
    def run(self, ctx: Context, input: Steps) -> Any:
        n = ctx.step("one", int, input.n)  # marks the event's record for the heartbeat
        if input.label == "fail":
            raise RuntimeError("on purpose")
        return n

    def on_success(self, ctx: Context, output: Any) -> None:
        self.tick(ctx)

    def on_failure(self, ctx: Context, error: BaseException) -> None:
        self.tick(ctx)

    def tick(self, ctx: Context) -> None:
        """The supervisor's heartbeat ticking now, during the hook."""
        event = ctx._event
        assert event is not None
        RENEWED.append(FlowStore(get_broker()).renew([delivery(event.job_id, event.queue)]))


def test_write__a_replay_taken_over_writes_nothing(redis_ns: RedisNamespace) -> None:
    store = FlowStore(get_broker())
    call = "c1"
    store.start(call, StepsFlow.name, '{"n":1,"pause":0.0,"label":""}', "{}", None)
    old = store.acquire(call)
    assert old.kind == "ok"
    assert store.acquire(call).kind == "busy"  # two replays never hold one call
    redis_ns.client.delete(store.keys.lease(call))  # the old replay's lease expires (a freeze)
    new = store.acquire(call)
    assert new.kind == "ok"
    assert int(new.epoch) == int(old.epoch) + 1
    record = '{"state":"done"}'
    assert store.write(call, old.epoch, "keep", status={"step:s0": record}) == "lost"
    assert store.write(call, new.epoch, "keep", status={"step:s0": record}) == "ok"
    assert redis_ns.client.hget(store.keys.status(call), "step:s0") == record.encode()


def test_acquire__reads_state_in_one_round_trip_and_finished_is_final(
    redis_ns: RedisNamespace,
) -> None:
    store = FlowStore(get_broker())
    store.start("c2", StepsFlow.name, "{}", '{"a":1}', None)
    got = store.acquire("c2")
    assert got.meta["metadata"] == '{"a":1}'
    assert store.write("c2", got.epoch, "finish", meta={"status": "succeeded"}, retention=60) == (
        "ok"
    )
    assert store.acquire("c2").kind == "finished"
    assert 0 < redis_ns.client.ttl(store.keys.meta("c2")) <= 60  # removed after its retention
    assert store.acquire("nothing").kind == "gone"


def test_heartbeat__renews_the_replay_lease_and_reports_lost_and_canceled(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    store = FlowStore(broker)
    critical = get_settings().flow_queues[0]
    lost: list[tuple[str, float]] = []
    running: list[Delivery] = []
    beat = Heartbeat(broker, "w1", {}, lambda: running, on_lost=lambda d, s: lost.append((d.id, s)))
    calls = {}
    for name in ("kept", "taken", "canceled"):
        call = WaitFlow.start(Wait(), call_id=f"call-{name}")
        got = store.acquire(call)
        task = f"task-{name}"
        redis_ns.client.hset(broker.keys(critical).task(task), REPLAY_FIELD, f"{call} {got.epoch}")
        running.append(delivery(task, critical))
        calls[name] = call
    for call in calls.values():
        redis_ns.client.pexpire(store.keys.lease(call), 500)
    redis_ns.client.set(store.keys.lease(calls["taken"]), "99")  # another replay's epoch
    assert cancel(calls["canceled"], "stop") is True  # a replay runs: asked to stop
    beat.renew()
    assert sorted(task for task, _ in lost) == ["task-canceled", "task-taken"]
    assert redis_ns.client.pttl(store.keys.lease(calls["kept"])) > 500
    run = get_run(calls["canceled"])
    assert run is not None
    assert run.status == "running"  # ends when its replay stops (see test_flows)


def test_cancel__a_running_replay_ends_canceled_at_its_next_write(redis_ns: RedisNamespace) -> None:
    from django_jobs.testing import run_burst

    call = StepsFlow.start(Steps(n=2))
    store = FlowStore(get_broker())
    got = store.acquire(call)  # as if a replay were running
    assert cancel(call, "no more") is True
    assert store.write(call, got.epoch, "keep", status={"step:s0": "{}"}) == "canceled"
    redis_ns.client.delete(store.keys.lease(call))
    run_burst(list(get_settings().flow_queues))
    run = get_run(call)
    assert run is not None
    assert run.status == "canceled"
    assert run.error == "canceled: no more"


def test_replay__a_lease_that_expired_untaken_goes_on_in_a_fresh_event(
    redis_ns: RedisNamespace, monkeypatch: Any
) -> None:
    from django_jobs.testing import run_burst
    from testproject.shop import flows as shop

    store = FlowStore(get_broker())
    real = shop.record
    expired: list[str] = []

    def expire_then_record(call_id: str, step: str, pause: float = 0.0) -> str:
        if not expired:  # the first run of the first step outlives its lease (a GC pause)
            expired.append(step)
            redis_ns.client.delete(store.keys.lease(call_id))
        return real(call_id, step, pause)

    monkeypatch.setattr(shop, "record", expire_then_record)
    call = StepsFlow.start(Steps(n=2))
    outcomes = run_burst(list(get_settings().flow_queues))
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert len(outcomes) == 2  # the first replay's write was refused; a fresh event went on


def test_heartbeat__a_tick_during_a_hook_does_not_interrupt_it(redis_ns: RedisNamespace) -> None:
    from django_jobs.testing import run_burst

    RENEWED.clear()
    calls = [Hooked.start(Steps(n=1)), Hooked.start(Steps(n=1, label="fail"))]
    run_burst(list(get_settings().flow_queues))
    assert [get_run(c).status for c in calls] == ["succeeded", "failed"]  # type: ignore[union-attr]
    assert RENEWED == [[], []]  # red before: "lost" for both, the hooks interrupted


def test_renew__a_lease_gone_under_a_newer_epoch_is_lost(redis_ns: RedisNamespace) -> None:
    broker = get_broker()
    store = FlowStore(broker)
    critical = get_settings().flow_queues[0]
    call = WaitFlow.start(Wait(), call_id="call-gone")
    old = store.acquire(call)
    redis_ns.client.hset(broker.keys(critical).task("t1"), REPLAY_FIELD, f"{call} {old.epoch}")
    assert store.write(call, old.epoch, "release") == "ok"  # the lease is gone, the epoch kept
    assert store.renew([delivery("t1", critical)]) == []
    redis_ns.client.hincrby(store.keys.meta(call), "epoch", 1)  # a newer replay took and left it
    assert [why for _, why in store.renew([delivery("t1", critical)])] == ["lost"]


def test_renew__a_lease_that_expired_unreleased_is_lost(redis_ns: RedisNamespace) -> None:
    """A lease that ran out (a stalled worker, a partition) is lost even before anyone takes the
    call over: only a replay that released or finished the run itself renews nothing as `ok`
    (review: "ok" for an expired lease let a second replay acquire the call beside it)."""
    broker = get_broker()
    store = FlowStore(broker)
    critical = get_settings().flow_queues[0]
    call = WaitFlow.start(Wait(), call_id="call-expired")
    old = store.acquire(call)
    redis_ns.client.hset(broker.keys(critical).task("t1"), REPLAY_FIELD, f"{call} {old.epoch}")
    redis_ns.client.delete(store.keys.lease(call))  # expired: nobody released it
    assert [why for _, why in store.renew([delivery("t1", critical)])] == ["lost"]
