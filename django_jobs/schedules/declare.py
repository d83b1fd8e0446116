"""How a schedule is declared (`Cron`, `Every`) and the one resolved form (`Schedule`) the
scheduler, the checks and the inspector use.

Fire times are epoch seconds. An `Every` fires on multiples of its period since the epoch (UTC),
so every worker computes the same fire times: `Every(30)` fires at :00 and :30 of each minute,
whenever a worker started. A `Cron` is evaluated in its time zone by cronsim, which follows
Debian cron across daylight-saving changes: a daily 02:30 job fires once on the spring-forward
day (at 03:00, the first moment after the gap) and once on the fall-back day (the first 02:30).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

__all__ = ["CATCH_UP", "CATCH_UP_LIMIT", "Cron", "CronSimError", "Every", "Schedule"]

#: What a schedule does with fire times missed while no worker ran it (see Schedule.catch_up).
CATCH_UP = ("one", "all", "none")
#: The most missed fire times `catch_up="all"` enqueues at once (the newest ones).
CATCH_UP_LIMIT = 100

CatchUp = Literal["one", "all", "none"]


@dataclass(frozen=True)
class Cron:
    """A cron expression: 5 fields (minute hour day month weekday), or 6 with seconds first.

    `Cron("0 3 * * *", timezone="Europe/Paris")` fires at 03:00 Paris time every day.
    """

    expression: str
    timezone: str = "UTC"


@dataclass(frozen=True)
class Every:
    """A fixed period: `Every(30)` (seconds) or `Every(timedelta(minutes=5))`."""

    period: timedelta | float

    @property
    def seconds(self) -> float:
        """The period in seconds."""
        if isinstance(self.period, timedelta):
            return self.period.total_seconds()
        return float(self.period)


def _every_words(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return "every second" if seconds == 1 else f"every {seconds:g} seconds"


@dataclass(frozen=True)
class Schedule:
    """One configured schedule, resolved (from JOBS["SCHEDULE"] or a job class's `schedule`).

    Exactly one of `cron` and `every` is set. `options` holds the enqueue options given
    (queue, max_attempts, timeout, retention); the job's defaults apply to the rest.
    """

    name: str
    #: The registered name of the job it enqueues.
    job: str
    cron: str | None = None
    #: The period in seconds.
    every: float | None = None
    timezone: str = "UTC"
    #: The job's payload, as the dict of its payload dataclass.
    payload: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    #: Missed fire times on return: "one" (the newest only), "all" (up to CATCH_UP_LIMIT,
    #: oldest first) or "none" (only a fire time that is not yet missed).
    catch_up: CatchUp = "one"
    #: False: skip a fire time while the task of the previous fire is pending or running.
    overlap: bool = True

    @property
    def expression(self) -> str:
        """The cron expression, or "every N seconds"."""
        return self.cron if self.cron is not None else f"every {self.every:g} seconds"

    def describe(self) -> str:
        """In words: "every 30 seconds", "At 03:00 every day", or the expression itself."""
        if self.every is not None:
            return _every_words(self.every)
        assert self.cron is not None
        try:
            return CronSim(self.cron, datetime.now(ZoneInfo(self.timezone))).explain()
        except Exception:  # explain() does not cover every expression cronsim runs
            return self.cron

    @property
    def period(self) -> float:
        """Seconds between two fire times (a cron's: between its next two, from now)."""
        if self.every is not None:
            return self.every
        now = datetime.now().timestamp()
        first = self.next_fire(now)
        return self.next_fire(first) - first

    def next_fire(self, after: float) -> float:
        """The first fire time strictly after `after` (epoch seconds)."""
        if self.every is not None:
            return (math.floor(after / self.every) + 1) * self.every
        assert self.cron is not None
        start = datetime.fromtimestamp(after, ZoneInfo(self.timezone))
        return next(CronSim(self.cron, start)).timestamp()

    def last_fire(self, at: float) -> float:
        """The last fire time at or before `at` (epoch seconds)."""
        if self.every is not None:
            return math.floor(at / self.every) * self.every
        assert self.cron is not None
        # cronsim's reverse iteration starts strictly before its start: start just after `at`.
        start = datetime.fromtimestamp(math.floor(at) + 1, ZoneInfo(self.timezone))
        return next(CronSim(self.cron, start, reverse=True)).timestamp()

    def fires_between(self, after: float, until: float, limit: int) -> list[float]:
        """The fire times in (after, until], oldest first: the newest `limit` of them."""
        times: list[float] = []
        at = self.last_fire(until)
        while at > after and len(times) < limit:
            times.append(at)
            at = self.last_fire(at - (self.every or 1e-3))  # the fire time before `at`
        return times[::-1]
