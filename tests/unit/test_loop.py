import logging

import pytest
import redis

from django_jobs.exceptions import BrokerRefused, BrokerUnavailable
from django_jobs.worker.loop import FIRST, JITTER, MOST, Backoff, Component, Ticker


def down() -> BrokerUnavailable:
    """The error the broker raises when Redis does not answer (its cause chained)."""
    try:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")
    except redis.ConnectionError as cause:
        try:
            raise BrokerUnavailable("Redis at redis://127.0.0.1:6399/0 did not answer") from cause
        except BrokerUnavailable as exc:
            return exc


class Counter(Component):
    def __init__(self, interval: float, fail: Exception | None = None) -> None:
        self.interval = interval
        self.fail = fail
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        if self.fail is not None:
            raise self.fail


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_ticker__runs_each_component_on_its_interval() -> None:
    clock = Clock()
    fast, slow = Counter(1), Counter(5)
    ticker = Ticker([fast, slow], clock=clock)

    waits = []
    for _ in range(10):
        waits.append(ticker.run_due())
        clock.now += 1

    assert (fast.ticks, slow.ticks) == (10, 2)
    assert waits[0] == 1


def test_ticker__a_failing_tick_is_logged_once_and_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    broken = Counter(1, fail=RuntimeError("a bug"))
    ticker = Ticker([broken], clock=clock)

    with caplog.at_level(logging.INFO):
        for _ in range(5):
            ticker.run_due()
            clock.now += 1
        broken.fail = None
        ticker.run_due()

    assert broken.ticks == 6
    # A bug keeps its traceback, once; then one line when it works again.
    assert caplog.text.count("counter tick failed: a bug") == 1
    assert caplog.text.count("Traceback") == 1
    assert "counter works again after 5.0s" in caplog.text
    assert len(caplog.records) == 2


def test_ticker__unreachable_redis_is_one_line_and_a_bounded_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Found trying it (issue 12): about 93 lines a second during an outage, a traceback on every
    # forwarder, heartbeat and recoverer tick.
    clock = Clock()
    components = [Counter(0.5, fail=down()), Counter(1, fail=down()), Counter(5, fail=down())]
    ticker = Ticker(components, clock=clock)

    with caplog.at_level(logging.INFO):
        for _ in range(600):  # a minute of outage, looked at every 0.1 s
            ticker.run_due()
            clock.now += 0.1
        for c in components:
            c.fail = None
        clock.now += MOST * (1 + JITTER)  # past the longest back-off: the retry is due
        ticker.run_due()

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("Redis unreachable: Redis at redis://127.0.0.1:6399/0 did not")
    assert lines[0].endswith("(counter, counter, counter paused; retrying every 0.5 to 5s)")
    assert lines[1] == "Redis reachable again after 66.0s (counter, counter, counter resumed)"
    assert "Traceback" not in caplog.text
    # Only the first due component tries Redis each time, about every 5 s once backed off;
    # the retry ran them all (the one that failed first, first).
    assert components[0].ticks <= 60 / (MOST * (1 - JITTER)) + 6
    assert [c.ticks for c in components[1:]] == [1, 1]


def test_ticker__an_error_redis_answers_with_does_not_pause_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    refused = Counter(1, fail=BrokerRefused("WRONGTYPE for <ns>:workers"))
    fine = Counter(1)
    ticker = Ticker([refused, fine], clock=clock)

    with caplog.at_level(logging.INFO):
        for _ in range(10):
            ticker.run_due()
            clock.now += 1

    assert (refused.ticks, fine.ticks) == (10, 10)
    assert caplog.text.count("WRONGTYPE") == 1
    assert "Traceback" not in caplog.text


def test_backoff__doubles_to_a_cap_with_jitter() -> None:
    low, high = Backoff(rand=lambda: 0.0), Backoff(rand=lambda: 0.999999)

    lows = [low.next() for _ in range(8)]
    highs = [high.next() for _ in range(8)]
    low.reset()

    assert lows == pytest.approx([FIRST * 0.8 * 2**n for n in range(4)] + [MOST * 0.8] * 4)
    assert highs == pytest.approx([FIRST * 1.2 * 2**n for n in range(4)] + [MOST * 1.2] * 4)
    assert low.next() == pytest.approx(FIRST * 0.8)


class Vital(Counter):
    """A component the worker cannot go on without (as the heartbeat is)."""

    give_up_after = 30.0


def test_ticker__gives_up_once_a_vital_component_failed_for_longer_than_its_limit() -> None:
    clock = Clock()
    vital = Vital(1, fail=down())
    ticker = Ticker([vital, Counter(1)], clock=clock, backoff=Backoff(jitter=0))

    while clock.now < 100.0 + 30.0:
        ticker.run_due()
        clock.now += 0.5
        assert not ticker.gave_up, ticker.gave_up
    clock.now += 5.0  # past the limit: the next failed tick gives up
    ticker.run_due()

    assert ticker.gave_up.startswith(f"vital failed {vital.ticks} times in a row, for 3")
    assert "(longer than 30s): Redis at redis://127.0.0.1:6399/0 did not answer" in ticker.gave_up


def test_ticker__a_vital_component_that_works_again_starts_its_count_over() -> None:
    clock = Clock()
    vital = Vital(1, fail=RuntimeError("refused"))
    ticker = Ticker([vital], clock=clock)
    for _ in range(25):
        ticker.run_due()
        clock.now += 1.0
    vital.fail = None
    ticker.run_due()  # works: the count starts over
    vital.fail = RuntimeError("refused")

    for _ in range(25):
        clock.now += 1.0
        ticker.run_due()

    assert not ticker.gave_up
    assert ticker.failures == [25]


def test_ticker__a_component_says_what_failing_means_for_it() -> None:
    # The heartbeat: a beat that fails after the leases were renewed is no reason to stop.
    class LeasesFine(Vital):
        def failing_for(self, since_a_tick_worked: float) -> float:
            return 0.0

    clock = Clock()
    ticker = Ticker([LeasesFine(1, fail=RuntimeError("corrupt registry key"))], clock=clock)
    for _ in range(100):
        ticker.run_due()
        clock.now += 1.0

    assert not ticker.gave_up
