"""Schedules: periodic jobs that fire once per fire time, however many workers run.

Declared in JOBS["SCHEDULE"] or on a job class (`schedule = Cron("0 3 * * *")`), checked at
start-up (`schedule_errors`, ids E020-E027), resolved by `get_schedules`, fired by every
worker's scheduler loop (django_jobs.worker.scheduler), and read and acted on through the
Inspector (`schedules`, `schedule`, `fire_history`, `run_schedule_now`, `pause_schedule`,
`resume_schedule`).
"""

from __future__ import annotations

from django_jobs.schedules.declare import CATCH_UP, CATCH_UP_LIMIT, Cron, Every, Schedule
from django_jobs.schedules.registry import check_schedules, get_schedules, schedule_errors

__all__ = [
    "CATCH_UP",
    "CATCH_UP_LIMIT",
    "Cron",
    "Every",
    "Schedule",
    "check_schedules",
    "get_schedules",
    "schedule_errors",
]
