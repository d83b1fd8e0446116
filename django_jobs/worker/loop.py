"""The one loop every background component shares: call `tick()` every `interval` seconds.

Components run inside the supervisor's own loop rather than in threads: the supervisor forks
children, and forking a process with other threads can copy a lock some thread held. A tick that
fails never stops the worker, and never floods its log:

- Redis unreachable (a connection error or a timeout): one line for the whole worker, every
  component paused and retried together after a bounded, jittered back-off (`Backoff`), then one
  line when Redis answers again (`Outage`). Tracebacks only at DEBUG.
- Redis answering with an error, or a bug: one line for that component when its error changes,
  the others go on; it is tried again at its interval.

Either way the ticker counts each component's consecutive failures. A component whose ticks
have failed for longer than its `give_up_after` (the heartbeat's: the lease) makes the ticker
give up: `gave_up` says why, and the supervisor stops the worker.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence

from django_jobs.exceptions import BrokerRefused, BrokerUnavailable

Clock = Callable[[], float]

#: Reconnect back-off: the first wait in seconds, doubling up to MOST, each one +-JITTER.
FIRST = 0.5
MOST = 5.0
JITTER = 0.2


def unreachable(exc: BaseException) -> bool:
    """Whether a broker error means Redis did not answer at all (rather than answered "no":
    BrokerRefused). By class, not by the chained cause: the broker raises without one, as the
    cause's frames hold the password (redis-py's AUTH arguments)."""
    return isinstance(exc, BrokerUnavailable) and not isinstance(exc, BrokerRefused)


class Backoff:
    """Seconds to wait before the next try: FIRST, doubling up to MOST, each +-JITTER at random
    (so that the workers of a fleet do not all reconnect in the same instant)."""

    def __init__(
        self,
        first: float = FIRST,
        most: float = MOST,
        jitter: float = JITTER,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.first = first
        self.most = most
        self.jitter = jitter
        self.rand = rand
        self.failures = 0

    def next(self) -> float:
        """The wait after one more failure."""
        base = min(self.most, self.first * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return base * (1 + self.jitter * (2 * self.rand() - 1))

    def reset(self) -> None:
        """Redis answered: the next failure waits FIRST again."""
        self.failures = 0


class Outage:
    """Log one line when Redis stops answering and one when it answers again.

    `what` names what is paused meanwhile ("heartbeat, forwarder, ..." or "child 123"). Every
    failure's traceback goes to DEBUG.
    """

    def __init__(self, logger: logging.Logger, what: str, clock: Clock = time.monotonic) -> None:
        self.logger = logger
        self.what = what
        self.clock = clock
        #: When the outage began (by clock), None while Redis answers.
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        self.logger.debug("Redis call failed (%s)", self.what, exc_info=exc)
        if self.since is None:
            self.since = self.clock()
            self.logger.warning(
                "Redis unreachable: %s (%s paused; retrying every %g to %gs)",
                exc, self.what, FIRST, MOST,
            )  # fmt: skip

    def answered(self) -> None:
        if self.since is not None:
            self.logger.warning(
                "Redis reachable again after %.1fs (%s resumed)",
                self.clock() - self.since, self.what,
            )  # fmt: skip
            self.since = None


class Component:
    """A background job of the worker: `tick()` does one pass."""

    #: Seconds between two ticks.
    interval: float = 1.0
    #: Seconds of failing (see `failing_for`) after which the worker cannot go on without this
    #: component; None: it can.
    give_up_after: float | None = None
    logger = logging.getLogger("django_jobs.worker")

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    def tick(self) -> None:
        raise NotImplementedError

    def failing_for(self, since_a_tick_worked: float) -> float:
        """How long this component has been failing at what matters; by default, whole ticks."""
        return since_a_tick_worked


class Ticker:
    """Run each component's tick when it is due, by a clock that tests can move."""

    logger = logging.getLogger("django_jobs.worker")

    def __init__(
        self,
        components: Sequence[Component],
        clock: Clock = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self.components = list(components)
        self.clock = clock
        now = clock()
        self.due = [now] * len(self.components)
        self.backoff = backoff or Backoff()
        names = ", ".join(c.name for c in self.components)
        self.outage = Outage(self.logger, names, clock)
        #: While Redis is unreachable: when to try again (every component waits for it).
        self.retry_at: float | None = None
        #: The current error of each failing component (by index), and since when.
        self.failing: dict[int, tuple[str, float]] = {}
        #: When each component's last tick worked (by index; its creation before the first).
        self.worked_at = [now] * len(self.components)
        #: Each component's failed ticks since its last one that worked (by index).
        self.failures = [0] * len(self.components)
        #: Why the worker must stop (a component failed past its give_up_after), or "".
        self.gave_up = ""

    def run_due(self) -> float:
        """Tick every due component; return the seconds until the next one is due."""
        now = self.clock()
        if self.retry_at is not None and now < self.retry_at:
            return self.retry_at - now
        self.retry_at = None
        for index, component in enumerate(self.components):
            if now < self.due[index]:
                continue
            try:
                component.tick()
            except Exception as exc:
                self._count(index, component, exc)
                if unreachable(exc):
                    # Every other component would wait out the same timeout: pause them all.
                    # What was due stays due, in order (the heartbeat first), for the retry.
                    self.outage.failed(exc)
                    self.retry_at = self.clock() + self.backoff.next()
                    return max(0.0, self.retry_at - self.clock())
                self._failed(index, component, exc)
            else:
                self.worked_at[index], self.failures[index] = self.clock(), 0
                self._recovered(index, component)
            self.outage.answered()
            self.backoff.reset()
            self.due[index] = self.clock() + component.interval
        return max(0.0, min(self.due, default=now + 1.0) - self.clock())

    def _count(self, index: int, component: Component, exc: Exception) -> None:
        """Count one more failed tick; give up once it has failed for too long."""
        self.failures[index] += 1
        failing_for = component.failing_for(self.clock() - self.worked_at[index])
        limit = component.give_up_after
        if limit is not None and failing_for > limit and not self.gave_up:
            self.gave_up = (
                f"{component.name} failed {self.failures[index]} times in a row, for "
                f"{failing_for:.0f}s (longer than {limit:g}s): {exc}"
            )

    def _failed(self, index: int, component: Component, exc: Exception) -> None:
        """A tick failed, Redis reachable: one line per change of error, the others go on."""
        text = f"{type(exc).__name__}: {exc}"
        known = self.failing.get(index)
        if known is not None and known[0] == text:
            component.logger.debug("%s tick failed again", component.name, exc_info=exc)
            return
        self.failing[index] = (text, known[1] if known else self.clock())
        # A broker error is explained by its message; anything else is a bug: its traceback.
        bug = not isinstance(exc, BrokerUnavailable)
        component.logger.log(
            logging.ERROR if bug else logging.WARNING,
            "%s tick failed: %s (tried again every %gs; logged again if the error changes)",
            component.name, exc, component.interval, exc_info=exc if bug else None,
        )  # fmt: skip
        if not bug:
            component.logger.debug("%s tick failed", component.name, exc_info=exc)

    def _recovered(self, index: int, component: Component) -> None:
        known = self.failing.pop(index, None)
        if known is not None:
            component.logger.warning(
                "%s works again after %.1fs", component.name, self.clock() - known[1]
            )
