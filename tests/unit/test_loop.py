import logging

import pytest

from django_jobs.worker.loop import Component, Ticker


class Counter(Component):
    def __init__(self, interval: float, fail: bool = False) -> None:
        self.interval = interval
        self.fail = fail
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        if self.fail:
            raise RuntimeError("redis went away")


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


def test_ticker__a_failing_tick_is_logged_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    broken = Counter(1, fail=True)
    ticker = Ticker([broken], clock=clock)

    with caplog.at_level(logging.ERROR):
        ticker.run_due()
        clock.now += 1
        ticker.run_due()

    assert broken.ticks == 2
    assert caplog.text.count("Counter tick failed") == 2
