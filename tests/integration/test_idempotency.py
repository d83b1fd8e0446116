"""once(), run_atomically() and pruning on the suite's database (DATABASE_URL: SQLite or PG)."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from django_jobs import once
from django_jobs.client import get_broker
from django_jobs.idempotency import processing, prune_batch, run_atomically, task_key
from django_jobs.models import ProcessedTask
from django_jobs.worker.janitor import CATCH_UP, Janitor
from testproject.probes.models import Effect
from tests.conftest import RedisNamespace

DAY = 86400


class Boom(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_once__first_run_commits_block_and_key_together() -> None:
    with once("charge:1") as first:
        assert first is True
        Effect.objects.create(key="charge:1")

    assert list(ProcessedTask.objects.values_list("key", flat=True)) == ["charge:1"]
    assert Effect.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_once__second_run_yields_false_and_writes_nothing() -> None:
    with once("charge:1") as first:
        if first:
            Effect.objects.create(key="charge:1")
    with once("charge:1") as again:
        if again:
            Effect.objects.create(key="charge:1")

    assert again is False
    assert Effect.objects.count() == 1
    assert ProcessedTask.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_once__exception_rolls_back_block_and_key() -> None:
    def charge() -> None:
        with once("charge:1") as first:
            assert first
            Effect.objects.create(key="charge:1")
            raise Boom

    with pytest.raises(Boom):
        charge()

    assert Effect.objects.count() == 0
    assert ProcessedTask.objects.count() == 0
    with once("charge:1") as retried:
        Effect.objects.create(key="charge:1")
    assert retried is True
    assert Effect.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_once__duplicate_inside_an_outer_transaction_leaves_it_usable() -> None:
    with once("k"):
        pass
    with transaction.atomic():
        Effect.objects.create(key="before")
        with once("k") as first:
            assert first is False
        Effect.objects.create(key="after")  # the failed insert did not poison the transaction

    assert sorted(Effect.objects.values_list("key", flat=True)) == ["after", "before"]


@pytest.mark.django_db(transaction=True)
def test_once__inside_an_outer_transaction_rolls_back_with_it() -> None:
    def outer() -> None:
        with transaction.atomic():
            with once("k") as first:
                assert first
                Effect.objects.create(key="k")
            raise Boom

    with pytest.raises(Boom):
        outer()

    assert ProcessedTask.objects.count() == 0
    assert Effect.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_once__records_the_running_task() -> None:
    with processing("billing.Charge", "abc123"), once("charge:1"):
        pass
    with once("outside"):
        pass

    rows = ProcessedTask.objects.order_by("key").values_list("key", "job", "job_id")
    assert list(rows) == [("charge:1", "billing.Charge", "abc123"), ("outside", "", "")]


@pytest.mark.django_db(transaction=True)
def test_once__refuses_a_key_longer_than_the_column() -> None:
    with pytest.raises(ValueError, match="over the limit of 255"), once("x" * 256):
        pass
    with pytest.raises(ValueError, match="non-empty"), once(""):
        pass


@pytest.mark.django_db(transaction=True)
def test_run_atomically__a_committed_task_is_not_run_again() -> None:
    calls = []

    def run() -> None:
        calls.append(1)
        Effect.objects.create(key="t1")

    assert run_atomically("billing.Charge", "t1", run) is True
    assert run_atomically("billing.Charge", "t1", run) is False

    assert calls == [1]
    row = ProcessedTask.objects.get()
    assert (row.key, row.job, row.job_id) == (task_key("t1"), "billing.Charge", "t1")


@pytest.mark.django_db(transaction=True)
def test_run_atomically__a_failed_run_leaves_nothing_and_runs_again() -> None:
    def fail() -> None:
        Effect.objects.create(key="t1")
        raise Boom

    with pytest.raises(Boom):
        run_atomically("billing.Charge", "t1", fail)
    assert (Effect.objects.count(), ProcessedTask.objects.count()) == (0, 0)

    assert run_atomically("billing.Charge", "t1", lambda: Effect.objects.create(key="t1"))
    assert Effect.objects.count() == 1


def _rows(count: int, age_days: float, prefix: str) -> None:
    at = timezone.now() - dt.timedelta(days=age_days)
    ProcessedTask.objects.bulk_create(
        ProcessedTask(key=f"{prefix}{i}", processed_at=at) for i in range(count)
    )


@pytest.mark.django_db(transaction=True)
def test_prune_batch__deletes_only_expired_rows_at_most_a_batch() -> None:
    _rows(25, 31, "old")
    _rows(5, 29, "new")

    assert prune_batch(30 * DAY, batch_size=10) == 10
    assert prune_batch(dt.timedelta(days=30), batch_size=10) == 10
    assert prune_batch(30 * DAY, batch_size=10) == 5
    assert prune_batch(30 * DAY, batch_size=10) == 0
    assert sorted(ProcessedTask.objects.values_list("key", flat=True)) == [
        f"new{i}" for i in range(5)
    ]


@pytest.mark.django_db(transaction=True)
def test_prune_batch__uses_the_retention_setting(settings: Any) -> None:
    settings.JOBS = {"PROCESSED_RETENTION": dt.timedelta(days=1)}
    _rows(3, 2, "old")
    _rows(2, 0.5, "new")

    assert prune_batch() == 3
    assert ProcessedTask.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_janitor__prunes_one_batch_per_tick_and_comes_back_soon_while_behind(
    redis_ns: RedisNamespace,
) -> None:
    _rows(25, 31, "old")
    janitor = Janitor(get_broker(), [], prune_size=10)  # no queue: the database part only

    janitor.tick()
    assert (ProcessedTask.objects.count(), janitor.interval) == (15, CATCH_UP)
    janitor.tick()
    assert (ProcessedTask.objects.count(), janitor.interval) == (5, CATCH_UP)
    janitor.tick()
    assert ProcessedTask.objects.count() == 0
    assert janitor.interval == get_broker().settings.janitor_interval


@pytest.mark.django_db(transaction=True)
def test_janitor__a_missing_table_is_one_warning_not_a_crash(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    from django.db import connection

    with connection.schema_editor() as editor:
        editor.delete_model(ProcessedTask)
    try:
        janitor = Janitor(get_broker(), [])
        janitor.tick()
        janitor.tick()
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(ProcessedTask)

    warnings = [r for r in caplog.records if "pruning processed tasks failed" in r.message]
    assert len([r for r in warnings if r.levelname == "WARNING"]) == 1


@pytest.mark.django_db(transaction=True)
def test_prune_processed__loops_batches_and_prints_counts() -> None:
    _rows(25, 31, "old")
    _rows(5, 1, "new")
    out = io.StringIO()

    call_command("prune_processed", "--batch-size", "10", "--database", "default", stdout=out)

    assert ProcessedTask.objects.count() == 5
    assert "default: deleted 25 processed tasks older than 30 days, 0:00:00 in 3 batches" in (
        out.getvalue()
    )
