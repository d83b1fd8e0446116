"""Firing a schedule: the task one fire time (or a "run now") enqueues, and the operator's
actions on schedules. Used by the worker's scheduler loop and by the Inspector.

A fire time's task carries the idempotency key `schedule:<name>:<fire time>` (scoped, like
every idempotency key, to the job and the queue) and goes to Redis through the broker's
`fire` script, which is the enqueue script plus the schedule's record: the key is set in the
same script as the enqueue, so two workers firing the same fire time enqueue one task.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django_jobs.broker.info import Fire, ScheduleInfo, ScheduleState
from django_jobs.broker.protocol import Accepted, Broker, EnqueueRequest
from django_jobs.client import Options, resolve
from django_jobs.exceptions import PayloadTooLarge, UnknownSchedule
from django_jobs.jobs import registry
from django_jobs.message import Message, encode
from django_jobs.schedules.declare import Schedule
from django_jobs.schedules.registry import get_schedules

#: Fires kept per schedule in its history (newest first).
HISTORY = 50
#: The shortest idempotency window of a fire time's key, in seconds.
MIN_WINDOW = 600.0


def fire_key(name: str, fire_time: float) -> str:
    """The idempotency key of one fire time of a schedule."""
    return f"schedule:{name}:{fire_time:.3f}"


def window(schedule: Schedule) -> float:
    """How long a fire time's key is kept: two periods, and never under MIN_WINDOW. A worker
    that tries an older fire time (catch_up="all", or frozen mid-tick) is refused by the
    schedule's last fire time, which only moves forward, in the same script."""
    return max(MIN_WINDOW, 2 * schedule.period)


def request(broker: Broker, schedule: Schedule, key: str, key_window: float) -> EnqueueRequest:
    """The task a fire of `schedule` enqueues, under the idempotency key `key`; the options
    resolved as an enqueue's (the entry's, then the job's, then JOBS)."""
    job = registry.get(schedule.job)
    resolved = resolve(job, Options(**schedule.options), broker.settings)
    message = Message(
        id=uuid.uuid4().hex,
        job=job.name,
        queue=resolved.queue,
        payload=schedule.payload,
        max_attempts=resolved.max_attempts,
        timeout=resolved.timeout,
        retention=resolved.retention,
        idempotency_key=key,
        sensitive=job.sensitive,
    )
    encoded = encode(message)
    size = len(encoded.encode())
    if size > broker.settings.max_payload_bytes:
        raise PayloadTooLarge(size, broker.settings.max_payload_bytes)
    return EnqueueRequest(
        id=message.id,
        queue=message.queue,
        encoded=encoded,
        idempotency_key=broker.keys(message.queue).idempotency(job.name, key),
        idempotency_window=key_window,
    )


def _at(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


class ScheduleActions:
    """The schedules as configured, with their state in Redis; "run now", pause and resume."""

    def __init__(self, broker: Broker, schedules: dict[str, Schedule] | None = None) -> None:
        self.broker = broker
        self._schedules = schedules

    @property
    def configured(self) -> dict[str, Schedule]:
        if self._schedules is None:
            self._schedules = get_schedules()
        return self._schedules

    def get(self, name: str) -> Schedule:
        """The schedule configured as `name`, or raise UnknownSchedule."""
        try:
            return self.configured[name]
        except KeyError:
            raise UnknownSchedule(name, tuple(self.configured)) from None

    def info(self, schedule: Schedule, state: ScheduleState, now: float) -> ScheduleInfo:
        return ScheduleInfo(
            name=schedule.name,
            job=schedule.job,
            expression=schedule.expression,
            words=schedule.describe(),
            timezone=schedule.timezone,
            next_fire_at=None if state.paused else _at(schedule.next_fire(now)),
            last_fire_at=_at(state.last_fired_at),
            last_task_id=state.last_task_id,
            last_task_queue=state.last_task_queue,
            paused=state.paused,
        )

    def infos(self) -> list[ScheduleInfo]:
        """Every configured schedule, by name."""
        names = sorted(self.configured)
        if not names:
            return []
        states = self.broker.schedule_states(names)
        now = self.broker.time()
        return [self.info(self.configured[n], states[n], now) for n in names]

    def one(self, name: str) -> ScheduleInfo:
        schedule = self.get(name)
        return self.info(schedule, self.broker.schedule_states([name])[name], self.broker.time())

    def history(self, name: str) -> list[Fire]:
        self.get(name)
        return self.broker.fire_history(name, HISTORY)

    def fire(self, schedule: Schedule, fire_time: float) -> tuple[str, Accepted | None]:
        """Enqueue the fire time's task. Returns its id with what the broker accepted (a
        duplicate: another worker fired this time), or None when the schedule's last fire is
        already at or past `fire_time`, or it is paused (nothing written)."""
        task = request(self.broker, schedule, fire_key(schedule.name, fire_time), window(schedule))
        return task.id, self.broker.fire(schedule.name, task, fire_time, HISTORY)

    def run_now(self, name: str) -> str:
        """Enqueue one fire of the schedule now (not a fire time); return its task id."""
        schedule = self.get(name)
        key = f"schedule:{name}:now:{uuid.uuid4().hex}"
        task = request(self.broker, schedule, key, MIN_WINDOW)
        self.broker.fire(name, task, None, HISTORY)
        return task.id

    def pause(self, name: str) -> None:
        self.get(name)
        self.broker.pause_schedule(name)

    def resume(self, name: str) -> None:
        self.get(name)
        self.broker.resume_schedule(name)
