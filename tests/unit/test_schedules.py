"""Schedule declarations: words, aligned fire times, DST in the schedule's time zone."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from django_jobs.schedules import Schedule


def paris(*args: int) -> float:
    return datetime(*args, tzinfo=ZoneInfo("Europe/Paris")).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        (Schedule("s", "j", every=30), "every 30 seconds"),
        (Schedule("s", "j", every=1), "every second"),
        (Schedule("s", "j", every=300), "every 5 minutes"),
        (Schedule("s", "j", every=3600), "every hour"),
        (Schedule("s", "j", every=1.5), "every 1.5 seconds"),
        (Schedule("s", "j", cron="0 3 * * *"), "At 03:00 every day"),
    ],
)
def test_schedule_describe__in_words(schedule: Schedule, words: str) -> None:
    assert schedule.describe() == words


def test_schedule_next_fire__every_is_aligned_so_all_workers_agree() -> None:
    sync = Schedule("s", "j", every=30)
    # Two workers started 7 s apart agree on :00 and :30.
    assert sync.next_fire(1_800_000_007.0) == 1_800_000_030.0
    assert sync.next_fire(1_800_000_014.5) == 1_800_000_030.0
    assert sync.next_fire(1_800_000_030.0) == 1_800_000_060.0  # strictly after
    assert sync.last_fire(1_800_000_030.0) == 1_800_000_030.0  # at or before


def test_schedule_next_fire__cron_in_its_time_zone() -> None:
    nightly = Schedule("s", "j", cron="0 3 * * *", timezone="Europe/Paris")
    assert nightly.next_fire(paris(2026, 6, 1, 12)) == paris(2026, 6, 2, 3)
    assert nightly.last_fire(paris(2026, 6, 2, 3)) == paris(2026, 6, 2, 3)


def test_schedule_next_fire__a_0230_job_across_dst_days() -> None:
    job = Schedule("s", "j", cron="30 2 * * *", timezone="Europe/Paris")
    # Spring forward (02:00 -> 03:00): once, at 03:00; fall back (03:00 -> 02:00): once.
    assert job.next_fire(paris(2026, 3, 28, 12)) == paris(2026, 3, 29, 3)
    assert job.next_fire(paris(2026, 3, 29, 3)) == paris(2026, 3, 30, 2, 30)
    first = job.next_fire(paris(2026, 10, 24, 12))
    assert first == datetime.fromisoformat("2026-10-25T02:30:00+02:00").timestamp()
    assert job.next_fire(first) == paris(2026, 10, 26, 2, 30)


def test_schedule_fires_between__newest_up_to_the_limit_oldest_first() -> None:
    every = Schedule("s", "j", every=10)
    assert every.fires_between(100, 135, 10) == [110, 120, 130]
    assert every.fires_between(100, 135, 2) == [120, 130]
    cron = Schedule("s", "j", cron="*/5 * * * * *")  # seconds field
    assert cron.fires_between(100, 121, 10) == [105, 110, 115, 120]
