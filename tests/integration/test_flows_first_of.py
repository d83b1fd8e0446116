"""ctx.first_of: whichever of several signals or the time comes first, settled by one script."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.flows import get_run, runs, send_signal
from django_jobs.flows.events import publish
from django_jobs.testing import run_burst
from testproject.shop.people import First, FirstOf
from tests.conftest import RedisNamespace, wait_until


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def ended(calls: list[str]) -> bool:
    return all(get_run(c).status == "succeeded" for c in calls)  # type: ignore[union-attr]


def test_first_of__a_signal_racing_the_time_settles_once_in_100_trials(
    redis_ns: RedisNamespace,
) -> None:
    # Every timer due by the time the race starts: replays of timers (forwarded and run one
    # by one by drain) against signals sent meanwhile, in the other order, from a thread.
    calls = [FirstOf.start(First(timeout=0.05, then=0.05)) for _ in range(100)]
    run_burst([get_settings().flow_queues[1]])  # the starts: every run now waits in first_of
    due = max(get_run(c).step("pick").next_at.timestamp() for c in calls)  # type: ignore[union-attr]
    wait_until(lambda: time.time() > due, timeout=5)
    answers: dict[str, bool] = {}

    def signal_all() -> None:
        wait_until(lambda: get_run(calls[0]).step("then") is not None, timeout=10)  # type: ignore[union-attr]
        for call in reversed(calls):  # some before their timer's replay, some after, some during
            answers[call] = send_signal(call, "go", call)

    sender = threading.Thread(target=signal_all)
    sender.start()
    wait_until(lambda: drain() or (not sender.is_alive() and ended(calls)), timeout=30)
    sender.join()
    for call in calls:  # duplicate events: a settled first_of is the same on every replay
        publish(call, FirstOf.name)
    drain()

    outcomes = {"go": 0, None: 0}
    for call in calls:
        run = get_run(call)
        assert run is not None
        winner = run.output["winner"]
        # send_signal said True if and only if the signal won; the time won otherwise
        assert (winner == "go") is answers[call], (call, run.output, answers[call])
        assert run.output["value"] == (call if winner == "go" else None)
        outcomes[winner] += 1
    assert sum(outcomes.values()) == 100, outcomes


def test_first_of__the_earliest_signal_wins_and_the_later_one_is_refused(
    redis_ns: RedisNamespace,
) -> None:
    call = FirstOf.start(First(timeout=None))
    drain()
    waiting = get_run(call)
    assert waiting is not None
    assert waiting.status == "waiting"
    assert waiting.step("pick").signals == ("go", "stop")  # type: ignore[union-attr]
    assert send_signal(call, "stop", 1) is True
    assert send_signal(call, "go", 2) is False  # its first_of has a winner already
    drain()
    run = get_run(call)
    assert run is not None
    assert run.output == {"winner": "stop", "value": 1, "timed_out": False}


def test_first_of__signals_sent_before_it_is_reached_earliest_wins(
    redis_ns: RedisNamespace,
) -> None:
    call = FirstOf.start(First(timeout=10))
    assert send_signal(call, "go", "a") is True  # kept: the flow does not wait yet
    assert send_signal(call, "stop", "b") is True
    drain()
    assert get_run(call).output == {"winner": "go", "value": "a", "timed_out": False}  # type: ignore[union-attr]


def test_first_of__the_time_first_refuses_the_late_signal(redis_ns: RedisNamespace) -> None:
    call = FirstOf.start(First(timeout=0.02))
    wait_until(lambda: drain() or get_run(call).status == "succeeded", timeout=10)  # type: ignore[union-attr]
    assert get_run(call).output == {"winner": None, "value": None, "timed_out": True}  # type: ignore[union-attr]
    assert send_signal(call, "go", 1) is False


def test_first_of__a_retried_signal_whose_wake_up_failed_wakes_the_run(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    call = FirstOf.start(First(timeout=None))
    drain()
    assert get_run(call).status == "waiting"  # type: ignore[union-attr]

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise BrokerUnavailable("Redis did not answer")

    with monkeypatch.context() as patched:
        patched.setattr(runs, "publish", unreachable)
        with pytest.raises(BrokerUnavailable):
            send_signal(call, "go", 1)  # stored, its wake-up event lost
    assert send_signal(call, "go", 1) is True  # the retry woke it (red before: False)
    drain()
    assert get_run(call).output == {"winner": "go", "value": 1, "timed_out": False}  # type: ignore[union-attr]
