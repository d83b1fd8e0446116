"""Flows on the real Redis, driven in this process (run_burst on the flows' queues)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_jobs.broker.factory import get_broker
from django_jobs.conf import get_settings
from django_jobs.flows import FlowError, cancel, get_run, list_runs, send_signal
from django_jobs.testing import run_burst
from testproject.shop.flows import (
    FanOut,
    FanOutFlow,
    Flaky,
    FlakyFlow,
    Nap,
    NapFlow,
    Steps,
    StepsFlow,
    Wait,
    WaitFlow,
)
from tests.conftest import RedisNamespace, wait_until


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def steps_run(ns: RedisNamespace) -> list[str]:
    return [x.decode() for x in ns.client.lrange(f"{ns.namespace}:probe:steps", 0, -1)]


def test_steps__a_three_step_flow_succeeds_each_step_once(redis_ns: RedisNamespace) -> None:
    call = StepsFlow.start(Steps(n=3))
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert run.output == ["s0-done", "s1-done", "s2-done"]
    assert [s.name for s in run.steps] == ["s0", "s1", "s2"]
    assert all(s.state == "done" and s.attempts == 1 for s in run.steps)
    assert [s.split(":")[1] for s in steps_run(redis_ns)] == ["s0", "s1", "s2"]


def test_steps__a_duplicate_event_replays_without_running_a_step(redis_ns: RedisNamespace) -> None:
    from django_jobs.flows.events import publish

    call = StepsFlow.start(Steps(n=3))
    drain()
    publish(call, StepsFlow.name)
    publish(call, StepsFlow.name)
    drain()
    assert len(steps_run(redis_ns)) == 3


def test_start__idempotency_key_returns_the_original_call(redis_ns: RedisNamespace) -> None:
    first = StepsFlow.start(Steps(n=1), idempotency_key="order-1")
    second = StepsFlow.start(Steps(n=1), idempotency_key="order-1")
    assert second == first
    assert StepsFlow.start(Steps(n=1), call_id="mine") == "mine"
    drain()
    assert len(steps_run(redis_ns)) == 2


def test_start__metadata_is_in_ctx_and_run(redis_ns: RedisNamespace) -> None:
    call = StepsFlow.start(Steps(n=1), metadata={"user": 7})
    drain()
    run = get_run(call)
    assert run is not None
    assert run.metadata == {"user": 7}


def test_step__retried_after_backoff_then_succeeds_and_hook_runs(redis_ns: RedisNamespace) -> None:
    call = FlakyFlow.start(Flaky(failures=2, attempts=3))
    wait_until(lambda: drain() or ((get_run(call) or None) and get_run(call).status == "succeeded"),
               timeout=10)  # fmt: skip
    run = get_run(call)
    assert run is not None
    assert run.steps[0].attempts == 3
    hooks = [h.decode() for h in redis_ns.client.lrange(f"{redis_ns.namespace}:probe:hooks", 0, -1)]
    assert hooks == [f"{call}:success:ok"]


def test_step__attempts_spent_fail_the_run(redis_ns: RedisNamespace) -> None:
    call = FlakyFlow.start(Flaky(failures=5, attempts=2))
    wait_until(lambda: drain() or get_run(call).status == "failed", timeout=10)  # type: ignore[union-attr]
    run = get_run(call)
    assert run is not None
    assert "step 'flaky' failed: RuntimeError: failure 2" in run.error
    hooks = [h.decode() for h in redis_ns.client.lrange(f"{redis_ns.namespace}:probe:hooks", 0, -1)]
    assert hooks[0].startswith(f"{call}:failure:")


def test_sleep__is_a_timer_and_the_run_sleeps(redis_ns: RedisNamespace) -> None:
    call = NapFlow.start(Nap(seconds=0.3))
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "sleeping"
    assert get_broker().client.zcard(f"{redis_ns.namespace}:{{flows_critical}}:scheduled") == 1
    wait_until(lambda: drain() or get_run(call).status == "succeeded", timeout=5)  # type: ignore[union-attr]
    assert [s.split(":")[1] for s in steps_run(redis_ns)] == ["before", "after"]


def test_signal__kept_when_early_first_wins(redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    assert send_signal(call, "go", {"n": 1}) is True
    assert send_signal(call, "go", {"n": 2}) is False
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert run.output == {"value": {"n": 1}, "received": True}


def test_signal__wakes_a_waiting_flow(redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert get_run(call).status == "waiting"  # type: ignore[union-attr]
    assert send_signal(call, "go", 5) is True
    drain()
    assert get_run(call).output == {"value": 5, "received": True}  # type: ignore[union-attr]
    assert send_signal(call, "go", 6) is False


def test_signal__after_the_wait_timed_out_is_false_for_ever(redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait(timeout=0.2))
    drain()
    wait_until(lambda: drain() or get_run(call).status == "succeeded", timeout=5)  # type: ignore[union-attr]
    assert get_run(call).output == {"value": None, "received": False}  # type: ignore[union-attr]
    assert send_signal(call, "go", 1) is False


def test_signal__late_to_a_timed_out_wait_of_a_running_flow(redis_ns: RedisNamespace) -> None:
    # The wait has timed out but the run has not ended: the signal is still refused.
    ns = redis_ns.namespace
    call = WaitFlow.start(Wait(timeout=0.2))
    drain()
    status = f"{ns}:flows:{{{call}}}_status"
    redis_ns.client.hset(status, "wait:go", json.dumps({"state": "timed_out"}))
    assert send_signal(call, "go", 1) is False


def test_signal__value_must_survive_json(redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    with pytest.raises(FlowError, match="JSON"):
        send_signal(call, "go", {1, 2})
    assert send_signal("no-such-call", "go", 1) is False


def test_cancel__a_waiting_flow_ends_at_once(redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert cancel(call, "changed my mind") is True
    run = get_run(call)
    assert run is not None
    assert run.status == "canceled"
    assert "changed my mind" in run.error
    assert cancel(call, "again") is False
    assert send_signal(call, "go", 1) is False


def test_parallel__all_items_with_limit(redis_ns: RedisNamespace) -> None:
    call = FanOutFlow.start(FanOut(n=50, limit=5, pause=0.002))
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded", run
    assert run.output == sum(range(50))
    seen = [
        int(x) for x in redis_ns.client.lrange(f"{redis_ns.namespace}:probe:concurrency", 0, -1)
    ]
    assert len(seen) == 50
    assert max(seen) <= 5


def test_list_runs__by_flow_and_status_paged(redis_ns: RedisNamespace) -> None:
    calls = [StepsFlow.start(Steps(n=1)) for _ in range(3)]
    waiting = WaitFlow.start(Wait())
    drain()
    page = list_runs(flow=StepsFlow, page=1, per_page=2)
    assert [r.call_id for r in page.runs] == calls[::-1][:2]
    assert page.has_next
    assert [r.call_id for r in list_runs(flow=StepsFlow, page=2, per_page=2).runs] == calls[:1]
    assert [r.call_id for r in list_runs(status="waiting").runs] == [waiting]
    assert len(list_runs(status="succeeded").runs) == 3


def test_step__name_used_twice_is_an_error_naming_it(redis_ns: RedisNamespace) -> None:
    from dataclasses import dataclass

    from django_jobs.flows import Flow

    @dataclass
    class In:
        x: int = 0

    class Twice(Flow[In]):
        name = "tests.Twice"

        def run(self, ctx: Any, input: In) -> Any:
            ctx.step("a", lambda: 1)
            ctx.step("a", lambda: 2)

    call = Twice.start(In())
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "failed"
    assert "'a' is used twice" in run.error


def test_unknown_flow__goes_dead_after_the_grace_with_the_message(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    from django_jobs.flows.events import start_call

    settings.JOBS = {**settings.JOBS, "FLOW_UNKNOWN_DELAY": 0.05, "FLOW_UNKNOWN_GRACE": 0.2}
    start_call("shop.Nobody", "nobody-1", {}, {}, None)
    critical = get_settings().flow_queues[0]
    wait_until(lambda: drain() or get_broker().client.zcard(get_broker().keys(critical).dead),
               timeout=10)  # fmt: skip
    broker = get_broker()
    _, ids = broker.state_ids(critical, "dead", 0, -1)
    (dead,) = broker.task_infos(critical, ids, "dead")
    assert dead is not None
    assert dead.error is not None
    assert "unknown flow 'shop.Nobody': is this worker's code up to date?" in dead.error


def test_step__value_that_is_not_json_is_refused_at_the_step(redis_ns: RedisNamespace) -> None:
    from dataclasses import dataclass

    from django_jobs.flows import Flow

    @dataclass
    class In:
        x: int = 0

    class NotJson(Flow[In]):
        name = "tests.NotJson"

        def run(self, ctx: Any, input: In) -> Any:
            return ctx.step("tuple", lambda: (1, 2))

    call = NotJson.start(In())
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "failed"
    assert "step 'tuple' failed: its value does not survive a JSON round trip" in run.error


def test_step__timeout_fails_the_attempt(redis_ns: RedisNamespace) -> None:
    import time as _time
    from dataclasses import dataclass

    from django_jobs.flows import Flow

    @dataclass
    class In:
        x: int = 0

    class Slow(Flow[In]):
        name = "tests.Slow"

        def run(self, ctx: Any, input: In) -> Any:
            return ctx.step("slow", _time.sleep, 5, timeout=0.1, max_attempts=1)

    call = Slow.start(In())
    started = _time.monotonic()
    drain()
    assert _time.monotonic() - started < 2
    run = get_run(call)
    assert run is not None
    assert "step timed out after 0.1 s" in run.error


@pytest.mark.django_db
def test_start__on_commit_waits_for_the_commit(
    redis_ns: RedisNamespace, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        call = StepsFlow.start(Steps(n=1), on_commit=True)
        assert get_run(call) is None
    assert len(callbacks) == 1
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"


def test_replay__a_memoised_replay_costs_two_round_trips(redis_ns: RedisNamespace) -> None:
    import time as _time

    from bench.flows import Counter
    from django_jobs.flows.engine import replay
    from django_jobs.flows.events import FlowEventPayload
    from testproject.shop.flows import BenchNap, StepsThenNap

    call = BenchNap.start(StepsThenNap(n=10, seconds=0.05))
    drain()
    wait_until(lambda: _time.time() > get_run(call).steps[-1].next_at.timestamp())  # type: ignore[union-attr]
    with Counter.installed() as counter:
        counter.count = 0
        replay(FlowEventPayload(call, BenchNap.name), None)  # its timer's event
        assert counter.count == 2  # acquire (and read), then the finish with the sleep's end
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
    assert run.output == sum(range(10))


def test_replay__hands_over_to_a_fresh_event_half_way_to_its_timeout(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "TIMEOUT": 0.5}
    call = StepsFlow.start(Steps(n=4, pause=0.1))
    outcomes = run_burst(list(get_settings().flow_queues))
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded", run.error
    assert len(outcomes) >= 2  # the start, then at least one hand-over (one event without)
    assert all(o.state == "completed" for o in outcomes)
    assert len(steps_run(redis_ns)) == 4


def test_replay__redis_failing_an_engine_write_retries_the_event_not_fail_the_run(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_jobs.broker.flows import FlowStore
    from django_jobs.exceptions import BrokerUnavailable

    real = FlowStore.write
    calls: list[str] = []

    def flaky_write(self: FlowStore, *args: Any, **kwargs: Any) -> str:
        calls.append(args[1])
        if len(calls) == 2:  # the first step's "done"
            raise BrokerUnavailable("Redis did not answer (a blip)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(FlowStore, "write", flaky_write)
    call = StepsFlow.start(Steps(n=2))
    (outcome,) = run_burst(list(get_settings().flow_queues))
    assert outcome.state == "retry"
    run = get_run(call)
    assert run is not None
    assert run.status == "running"


def test_api__parallel_tuples_one_arg_hooks_timedelta_backoff_iterable_pages(
    redis_ns: RedisNamespace,
) -> None:
    from dataclasses import dataclass
    from datetime import timedelta

    from django_jobs.flows import Flow

    seen: list[Any] = []

    @dataclass
    class In:
        x: int = 0

    def twice(i: int) -> int:
        return 2 * i

    class Shapes(Flow[In]):
        name = "tests.Shapes"

        def run(self, ctx: Any, input: In) -> Any:
            values = ctx.parallel("p", [(twice, i) for i in range(3)], limit=2)
            ctx.step("b", twice, 5, backoff=timedelta(seconds=1))
            return values

        def on_success(self, output: Any) -> None:  # the value alone
            seen.append(output)

    call = Shapes.start(In())
    drain()
    run = get_run(call)
    assert run is not None
    assert run.output == [0, 2, 4]
    assert seen == [[0, 2, 4]]
    assert run.step("b") is not None
    assert [r.call_id for r in list_runs(flow="tests.Shapes")] == [call]
    assert len(list_runs(status="succeeded")) == 1


def test_replay__a_chain_of_crashed_events_fails_the_run_at_its_bound(
    redis_ns: RedisNamespace,
) -> None:
    from django_jobs.flows.engine import CRASH_LOOP, replay
    from django_jobs.flows.events import FlowEventPayload
    from django_jobs.message import JobContext

    call = WaitFlow.start(Wait())
    event = JobContext("t1", 1, 1, get_settings().flow_queues[0], _far())
    bound = CRASH_LOOP * get_settings().max_crashes
    replay(FlowEventPayload(call, WaitFlow.name, crashes=bound - 2), event)
    run = get_run(call)
    assert run is not None
    assert run.status == "running"  # published afresh, crashes carried
    replay(FlowEventPayload(call, WaitFlow.name, crashes=bound - 1), event)
    run = get_run(call)
    assert run is not None
    assert run.status == "failed"
    assert "crashed their worker" in run.error


def _far() -> float:
    import time as _time

    return _time.time() + 300


def test_parallel__hands_over_half_way_to_its_events_timeout(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "TIMEOUT": 0.5}
    call = FanOutFlow.start(FanOut(n=20, limit=2, pause=0.05))
    outcomes = run_burst(list(get_settings().flow_queues))
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded", run.error
    assert run.output == sum(range(20))
    assert len(outcomes) >= 2  # one event alone would have run into its timeout
    assert len(redis_ns.client.lrange(f"{redis_ns.namespace}:probe:concurrency", 0, -1)) == 20


def test_signal__a_replay_after_a_timed_out_wait_never_flips_it(redis_ns: RedisNamespace) -> None:
    from testproject.shop.flows import WaitThenNap

    call = WaitThenNap.start(Wait(timeout=0.1))
    wait_until(lambda: drain() or get_run(call).status == "sleeping", timeout=5)  # type: ignore[union-attr]
    # The wait timed out and the run sleeps on: a late signal is refused...
    assert send_signal(call, "go", "late") is False
    # ...and the replays that follow (a duplicate event, then the sleep's end) still see None.
    from django_jobs.flows.events import publish

    publish(call, WaitThenNap.name)
    wait_until(lambda: drain() or get_run(call).status == "succeeded", timeout=5)  # type: ignore[union-attr]
    assert get_run(call).output == {"value": None, "received": False}  # type: ignore[union-attr]


def test_signal__a_retried_send_wakes_a_flow_the_first_send_could_not(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_jobs.exceptions import BrokerUnavailable
    from django_jobs.flows import runs

    call = WaitFlow.start(Wait())
    drain()

    def down(*args: Any, **kwargs: Any) -> None:
        raise BrokerUnavailable("Redis did not answer")

    with monkeypatch.context() as m:
        m.setattr(runs, "publish", down)
        with pytest.raises(BrokerUnavailable):
            send_signal(call, "go", 1)  # stored, but its wake-up event was not sent
    assert send_signal(call, "go", 1) is True  # the retry: a duplicate that woke the flow
    drain()
    assert get_run(call).output == {"value": 1, "received": True}  # type: ignore[union-attr]


def test_start__retried_with_its_idempotency_key_sends_the_event_a_failed_start_did_not(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_jobs.exceptions import BrokerUnavailable
    from django_jobs.flows import events

    def down(*args: Any, **kwargs: Any) -> None:
        raise BrokerUnavailable("Redis did not answer")

    with monkeypatch.context() as m:
        m.setattr(events, "publish", down)
        with pytest.raises(BrokerUnavailable):
            StepsFlow.start(Steps(n=1), idempotency_key="k1")  # recorded, event not sent
    call = StepsFlow.start(Steps(n=1), idempotency_key="k1")
    drain()
    run = get_run(call)
    assert run is not None
    assert run.status == "succeeded"
