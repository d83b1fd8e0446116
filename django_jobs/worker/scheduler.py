"""Scheduler: fire the configured schedules, in every worker.

Each tick reads Redis' clock and the schedules' state, and fires each schedule whose newest fire
time is past its last fire. However many workers do so at once, a fire time enqueues one task:
the fire time's idempotency key is set by the enqueue script itself, and its record's last fire
time only moves forward (broker `fire`, fire.lua). There is no leader: every worker's scheduler
is equal, and a worker that stops takes nothing with it.

Missed fire times (no worker ran for a while) follow the schedule's `catch_up`: "one" fires the
newest of them, "all" each of the newest CATCH_UP_LIMIT (oldest first), "none" none (only a fire
time less than MISSED_AFTER old, or half a period, still fires). A paused schedule's fire times
pass without a task; with `overlap=False` one passes while the previous fire's task is pending,
scheduled, running or waiting for a retry (logged as skipped).

Redis cost: nothing when no schedule is configured; else a tick (when the next fire time is due,
at least once a second) is one TIME, one pipelined HMGET of every schedule's state, and one fire
script per schedule due (plus one HGET of the previous task's state for an overlap=False one,
on a sharded queue one per shard until one finds it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from django_jobs.broker.info import ScheduleState
from django_jobs.broker.protocol import Broker
from django_jobs.broker.shards import shards_for
from django_jobs.conf import JobsSettings
from django_jobs.keys import State
from django_jobs.schedules import CATCH_UP_LIMIT, Schedule, check_schedules, get_schedules
from django_jobs.schedules.firing import ScheduleActions
from django_jobs.worker.loop import Component

logger = logging.getLogger("django_jobs.worker.scheduler")

#: Seconds after which a fire time counts as missed (for catch_up="none"), at most half a period.
MISSED_AFTER = 10.0
#: The longest and shortest seconds between two ticks.
MAX_INTERVAL = 1.0
MIN_INTERVAL = 0.01
#: Task states in which a fire's task is still on its way (overlap=False waits for them).
UNFINISHED = frozenset({State.SCHEDULED, State.PENDING, State.ACTIVE, State.RETRY})


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


def schedules_off(settings: JobsSettings) -> None:
    """With jobs disabled (REDIS_URL unset), say in one line that no schedule fires (nothing
    connects: the schedules are only counted)."""
    count = len(check_schedules(settings.queues)[0])
    logger.info(
        "Schedules are off: jobs are disabled (REDIS_URL is unset), so none of the %d "
        "configured schedule(s) fires.",
        count,
    )


class Scheduler(Component):
    logger = logger
    interval = MAX_INTERVAL

    def __init__(
        self,
        broker: Broker,
        schedules: dict[str, Schedule] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`schedules` default to the configured ones; `clock` (epoch seconds) to Redis' own,
        which tests replace to move time."""
        self.broker = broker
        self.schedules = get_schedules() if schedules is None else schedules
        self.actions = ScheduleActions(broker, self.schedules)
        self.clock = clock or broker.time
        #: Whether the state of schedules no longer configured has been deleted yet.
        self.synced = False

    def tick(self) -> None:
        if not self.synced:
            for name in self.broker.forget_schedules(sorted(self.schedules)):
                logger.info("Schedule %r is no longer configured: its state is deleted.", name)
            self.synced = True
        if not self.schedules:
            return
        now = self.clock()
        states = self.broker.schedule_states(sorted(self.schedules))
        for name, schedule in self.schedules.items():
            self._tick_one(schedule, states[name], now)
        soonest = min(s.next_fire(now) for s in self.schedules.values())
        self.interval = min(MAX_INTERVAL, max(MIN_INTERVAL, soonest - now + MIN_INTERVAL))

    def _skip(self, schedule: Schedule, fire_time: float, why: str, level: int) -> None:
        if self.broker.skip_fire(schedule.name, fire_time):  # this worker's line, not every one's
            logger.log(level, "Schedule %r skipped %s: %s.", schedule.name, _when(fire_time), why)

    def _tick_one(self, schedule: Schedule, state: ScheduleState, now: float) -> None:
        latest = schedule.last_fire(now)
        grace = min(MISSED_AFTER, schedule.period / 2)
        if state.last_fire is None and now - latest >= grace:
            # A new schedule starts with its next fire time, not with one from before it existed.
            self._skip(schedule, latest, "the schedule is new", logging.DEBUG)
            return
        last = state.last_fire if state.last_fire is not None else latest - schedule.period
        if last >= latest:
            return
        if state.paused:
            self._skip(schedule, latest, "the schedule is paused", logging.DEBUG)
            return
        if not schedule.overlap and self._previous_unfinished(state):
            self._skip(
                schedule, latest,
                f"the task of its previous fire ({state.last_task_id}) has not finished "
                "(overlap=False)", logging.WARNING,
            )  # fmt: skip
            return
        if schedule.catch_up == "all":
            times = schedule.fires_between(last, latest, CATCH_UP_LIMIT)
            if times[0] > schedule.next_fire(last):
                logger.warning(
                    "Schedule %r missed more than %d fire times: the newest %d fire, the "
                    "older ones are skipped.",
                    schedule.name, CATCH_UP_LIMIT, CATCH_UP_LIMIT,
                )  # fmt: skip
        elif schedule.catch_up == "none" and now - latest >= grace:  # "one" fires it
            self._skip(schedule, latest, "missed (catch_up='none')", logging.INFO)
            return
        else:
            times = [latest]
        for fire_time in times:
            self._fire(schedule, fire_time, missed=fire_time != schedule.last_fire(now))

    def _previous_unfinished(self, state: ScheduleState) -> bool:
        if state.last_task_id is None or state.last_task_queue is None:
            return False
        # A fire's task went to a shard of its queue (broker/shards.py): look on each.
        for queue in shards_for(self.broker.settings).of(state.last_task_queue):
            found = self.broker.task_state(queue, state.last_task_id)
            if found is not None:
                return found in UNFINISHED
        return False

    def _fire(self, schedule: Schedule, fire_time: float, *, missed: bool) -> None:
        task_id, accepted = self.actions.fire(schedule, fire_time)
        if accepted is None or accepted.duplicate_of is not None:
            return  # another worker fired (or skipped) it
        logger.info(
            "Schedule %r fired %s%s: %s task %s.",
            schedule.name, _when(fire_time), " (a missed fire time)" if missed else "",
            schedule.job, task_id,
        )  # fmt: skip
