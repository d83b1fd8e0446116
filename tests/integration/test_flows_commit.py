"""A flow's start and events against the database: on commit by default with
JOBS["ENQUEUE_ON_COMMIT"], and the outbox kept for starts but skipped by replays."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from django_jobs.backends import outbox
from django_jobs.conf import get_settings
from django_jobs.flows import get_run, send_signal
from django_jobs.testing import run_burst
from testproject.shop.flows import Nap, NapFlow, Steps, StepsFlow, Wait, WaitFlow
from tests.conftest import RedisNamespace, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def test_start__inside_atomic_waits_for_the_commit_with_enqueue_on_commit(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "ENQUEUE_ON_COMMIT": True}
    with transaction.atomic():
        call = StepsFlow.start(Steps(n=1))
        assert get_run(call) is None  # not recorded before the commit
    assert get_run(call) is not None
    started: list[str] = []
    with pytest.raises(RuntimeError):
        _start_and_roll_back(started)
    assert get_run(started[0]) is None
    with transaction.atomic():
        now = StepsFlow.start(Steps(n=1), on_commit=False)  # asked for at once
        assert get_run(now) is not None


def _start_and_roll_back(started: list[str]) -> None:
    with transaction.atomic():
        started.append(StepsFlow.start(Steps(n=1)))
        raise RuntimeError


def test_start__at_once_inside_atomic_without_the_setting(redis_ns: RedisNamespace) -> None:
    with transaction.atomic():
        call = StepsFlow.start(Steps(n=1))
        assert get_run(call) is not None


def test_outbox__a_start_and_a_signal_write_rows_a_replay_s_events_do_not(
    redis_ns: RedisNamespace, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    rows: list[str] = []
    write = outbox.write

    def counted(submissions: Any, using: str) -> Any:
        rows.extend(s.message.queue for s in submissions)
        return write(submissions, using)

    monkeypatch.setattr(outbox, "write", counted)
    nap = NapFlow.start(Nap(seconds=0.05))
    waiting = WaitFlow.start(Wait())
    drain()  # the nap's timer: an event published by a replay
    assert send_signal(waiting, "go", 1) is True
    wait_until(
        lambda: drain() or all(get_run(c).status == "succeeded" for c in (nap, waiting)),  # type: ignore[union-attr]
        timeout=10,
    )
    critical, starts = get_settings().flow_queues
    assert rows == [starts, starts, critical], rows  # the two starts and the web's signal
