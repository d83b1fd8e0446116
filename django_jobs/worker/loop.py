"""The one loop every background component shares: call `tick()` every `interval` seconds.

Components run inside the supervisor's own loop rather than in threads: the supervisor forks
children, and forking a process with other threads can copy a lock some thread held. A tick that
fails is logged and tried again at the next interval; it never stops the worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

Clock = Callable[[], float]


class Component:
    """A background job of the worker: `tick()` does one pass."""

    #: Seconds between two ticks.
    interval: float = 1.0
    logger = logging.getLogger("django_jobs.worker")

    def tick(self) -> None:
        raise NotImplementedError


class Ticker:
    """Run each component's tick when it is due, by a clock that tests can move."""

    def __init__(self, components: Sequence[Component], clock: Clock = time.monotonic) -> None:
        self.components = list(components)
        self.clock = clock
        now = clock()
        self.due = [now] * len(self.components)

    def run_due(self) -> float:
        """Tick every due component; return the seconds until the next one is due."""
        now = self.clock()
        for index, component in enumerate(self.components):
            if now >= self.due[index]:
                try:
                    component.tick()
                except Exception:
                    component.logger.exception("%s tick failed", type(component).__name__)
                self.due[index] = self.clock() + component.interval
        return max(0.0, min(self.due, default=now + 1.0) - self.clock())
