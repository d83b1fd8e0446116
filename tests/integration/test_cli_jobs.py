"""`manage.py jobs` against the real Redis: every subcommand, its --json, the confirmation
prompt and --yes, progress on bulk operations, and the errors (Redis down, jobs disabled, bad
input) as one line and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_jobs import inspector
from django_jobs.cli import progress
from django_jobs.client import get_broker
from django_jobs.inspector import RETRY_RULE, get_inspector
from django_jobs.keys import State
from django_jobs.models import OutboxJob
from django_jobs.testing import run_burst
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace, free_port
from tests.integration.test_inspector import Fails, Noop, Note, depths

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = {"job": "probes.Noop", "every": 30, "payload": {"n": 2}}

pytestmark = pytest.mark.django_db  # stats reads the outbox's table


class Terminal(io.StringIO):
    """A stream that says it is a terminal (for the prompt's stdin and rich's stderr)."""

    def isatty(self) -> bool:
        return True


def jobs(*args: str, **options: Any) -> tuple[str, str]:
    """Run `manage.py jobs ARGS`; return its stdout and stderr."""
    out, err = options.pop("stdout", io.StringIO()), options.pop("stderr", io.StringIO())
    call_command("jobs", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def jobs_json(*args: str, **options: Any) -> Any:
    out, _err = jobs(*args, "--json", **options)
    return json.loads(out)


def dead(count: int) -> list[str]:
    """count dead tasks of queue default (max_attempts 1), oldest first."""
    Fails.enqueue_many([Note(str(n)) for n in range(count)])
    run_burst()
    _total, ids = get_broker().state_ids("default", State.DEAD, 0, -1, newest_first=False)
    assert len(ids) == count
    return ids


# -- stats ----------------------------------------------------------------------------------


def test_stats__queues_workers_and_outbox_as_a_table_and_as_json(redis_ns: RedisNamespace) -> None:
    dead(1)
    Noop.enqueue(Note("a"))
    Noop.enqueue(Note("b"), queue="low")

    out, _ = jobs("stats")
    data = jobs_json("stats")

    lines = out.splitlines()
    assert lines[0].split() == [
        *("QUEUE", "PAUSED", "SCHEDULED", "PENDING", "PARKED", "ACTIVE", "RETRY", "DEAD"),
        *("COMPLETED", "CANCELED", "DONE", "TODAY", "FAILED", "TODAY"),
    ]
    assert lines[2].split() == ["default", "no", "0", "1", "0", "0", "0", "1", "0", "0", "0", "1"]
    assert "workers: 0 live, 0 of 0 slots busy" in out
    assert "outbox (off (JOBS['OUTBOX'])): 0 rows waiting, oldest -, 0 held" in out
    by_name = {q["name"]: q for q in data["queues"]}
    assert list(by_name) == ["critical", "default", "low"]
    assert (by_name["default"]["pending"], by_name["default"]["dead"]) == (1, 1)
    assert by_name["low"]["pending"] == 1
    assert by_name["default"]["failed_today"] == 1
    assert data["workers"] == []
    assert data["outbox"]["rows"] == 0
    assert data["outbox_on"] is False


def test_stats__live_workers_and_their_busy_slots(redis_ns: RedisNamespace) -> None:
    Noop.enqueue(Note("x"))
    delivery = get_broker().dequeue(["default"])
    assert delivery is not None
    info: dict[str, str | int | float] = {"host": "web-1", "pid": 42, "queues": "default",
                                          "concurrency": 4, "started": 1_700_000_000.5}  # fmt: skip
    Heartbeat(get_broker(), "web-1:42:aaaaaa", info, lambda: [delivery]).tick()
    Heartbeat(get_broker(), "web-2:7:bbbbbb", {**info, "host": "web-2"}, list).tick()

    out, _ = jobs("stats")
    (busy, idle) = jobs_json("stats")["workers"]

    assert "workers: 2 live, 1 of 8 slots busy" in out
    assert (busy["host"], busy["concurrency"], busy["queues"]) == ("web-1", 4, ["default"])
    assert busy["tasks"] == [{"id": delivery.id, "queue": "default", "job": Noop.name}]
    assert idle["tasks"] == []


def test_stats__the_outbox_depth_and_oldest_age(redis_ns: RedisNamespace, settings: Any) -> None:
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    # The test's transaction never commits, so the rows stay in the outbox for the relay.
    Noop.enqueue_many([Note("a"), Note("b")])
    OutboxJob.objects.update(created_at=timezone.now() - timedelta(seconds=125))

    data = jobs_json("stats")
    out, _ = jobs("stats")

    assert data["outbox_on"] is True
    assert data["outbox"]["rows"] == 2
    assert 125 <= data["outbox"]["oldest_age"] < 185
    assert depths(get_inspector())["pending"] == 0
    assert "outbox (on): 2 rows waiting, oldest 2m " in out
    assert "last relay never" in out


# -- ls, show -------------------------------------------------------------------------------


def test_ls__lists_a_state_with_queue_and_job_filters(redis_ns: RedisNamespace) -> None:
    ids = dead(3)
    Noop.enqueue(Note("pending"))

    data = jobs_json("ls", "dead")
    out, _ = jobs("ls", "dead")

    assert [t["id"] for t in data["tasks"]] == ids[::-1]  # newest first
    assert (data["state"], data["total"], data["more"]) == ("dead", 3, False)
    assert data["tasks"][0]["error"] == "RuntimeError: boom 2"
    assert "traceback" not in data["tasks"][0]
    assert all(task_id in out for task_id in ids)
    assert "3 shown of 3 dead" in out
    assert [t["id"] for t in jobs_json("ls", "dead", "--oldest", "--limit", "2")["tasks"]] == ids[
        :2
    ]
    assert jobs_json("ls", "dead", "--limit", "2")["more"] is True
    assert jobs_json("ls", "dead", "--queue", "low")["tasks"] == []
    assert jobs_json("ls", "dead", "--job", Noop.name)["tasks"] == []
    assert len(jobs_json("ls", "dead", "--job", Fails.name)["tasks"]) == 3
    assert len(jobs_json("ls", "pending")["tasks"]) == 1
    assert jobs("ls", "retry")[0] == "No retry tasks in critical, default, low.\n"


def test_ls__unknown_state_or_queue_names_the_choices(redis_ns: RedisNamespace) -> None:
    with pytest.raises(CommandError, match=r"invalid choice: 'deadd'.*'dead', 'completed'"):
        jobs("ls", "deadd")
    with pytest.raises(CommandError, match=r"Unknown queue 'nope'.*critical, default, low"):
        jobs("ls", "dead", "--queue", "nope")


def test_show__one_task_in_full(redis_ns: RedisNamespace) -> None:
    (task_id,) = dead(1)

    data = jobs_json("show", task_id)
    out, _ = jobs("show", task_id)

    assert (data["id"], data["state"], data["queue"]) == (task_id, "dead", "default")
    assert data["payload"] == {"text": "0"}
    assert "RuntimeError: boom 0" in data["traceback"]
    assert data["died_at"].endswith("+00:00")
    assert f"id           {task_id}" in out
    assert '"text": "0"' in out
    assert "traceback" in out


def test_show__unknown_or_malformed_id(redis_ns: RedisNamespace) -> None:
    with pytest.raises(
        CommandError, match=r"No task 0{32} in any queue \(critical, default, low\)"
    ):
        jobs("show", "0" * 32)
    with pytest.raises(CommandError, match="32 lowercase hex digits"):
        jobs("show", "nope")


# -- retry, delete --------------------------------------------------------------------------


def test_retry__ids_run_now_and_others_are_named(redis_ns: RedisNamespace) -> None:
    first, second = dead(2)

    assert jobs_json("retry", first) == {"retried": [first], "failed": {}}
    assert get_broker().task_state("default", first) == State.PENDING
    with pytest.raises(CommandError, match=rf"{first}: {RETRY_RULE} \(it is pending\)"):
        jobs("retry", first)
    with pytest.raises(CommandError, match=r"0{32}: No task"):
        jobs("retry", second, "0" * 32)
    assert get_broker().task_state("default", second) == State.PENDING


def test_retry_all_dead__asks_refuses_without_a_terminal_and_shows_progress(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspector, "BATCH_SIZE", 2)
    dead(5)

    with pytest.raises(CommandError, match=r"Run all 5 dead tasks of .* Pass --yes"):
        jobs("retry", "--all-dead", stdin=io.StringIO("y\n"))
    assert depths(get_inspector())["dead"] == 5

    out, err = jobs("retry", "--all-dead", "--yes", "--json")

    assert json.loads(out)["retried"] == 5
    assert json.loads(out)["queues"] == {"critical": 0, "default": 5, "low": 0}
    assert err.splitlines() == ["retried: 2/5", "retried: 4/5", "retried: 5/5"]
    assert depths(get_inspector())["pending"] == 5


def test_retry_all_dead__none_dead_asks_nothing(redis_ns: RedisNamespace) -> None:
    assert jobs_json("retry", "--all-dead", "--queue", "default") == {
        "retried": 0, "queues": {"default": 0},
    }  # fmt: skip


def test_retry__ids_and_all_dead_do_not_mix(redis_ns: RedisNamespace) -> None:
    with pytest.raises(CommandError, match="not both"):
        jobs("retry", "0" * 32, "--all-dead")
    with pytest.raises(CommandError, match="one or more task ids, or --all-dead"):
        jobs("retry")


def test_delete__asks_on_a_terminal_and_deletes_on_yes(redis_ns: RedisNamespace) -> None:
    first, second = dead(2)

    with pytest.raises(CommandError, match="Not confirmed: nothing was changed"):
        jobs("delete", first, stdin=Terminal("n\n"))
    assert get_broker().task_state("default", first) == State.DEAD

    out, err = jobs("delete", first, stdin=Terminal("y\n"))

    assert err == "Delete 1 task? Their idempotency keys are released. [y/N] "
    assert out == "Deleted: 1 task.\n"
    assert get_broker().task_state("default", first) is None
    assert jobs_json("delete", second, "--yes") == {"deleted": [second], "failed": {}}
    with pytest.raises(CommandError, match=r"Pass --yes"):
        jobs("delete", second)


def test_delete__a_running_task_is_named(redis_ns: RedisNamespace) -> None:
    handle = Noop.enqueue(Note("run"))
    assert get_broker().dequeue(["default"]) is not None
    with pytest.raises(CommandError, match=rf"{handle.id}: Task {handle.id} is running"):
        jobs("delete", handle.id, "--yes")


def test_delete_all_dead__in_batches(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspector, "BATCH_SIZE", 2)
    dead(3)
    assert jobs_json("delete", "--all-dead", "--yes")["deleted"] == 3
    assert depths(get_inspector())["dead"] == 0


# -- purge ----------------------------------------------------------------------------------


def test_purge__empties_a_state_and_releases_idempotency_keys(redis_ns: RedisNamespace) -> None:
    for n in range(3):
        Noop.enqueue(Note(str(n)), idempotency_key=f"k{n}")
    Noop.enqueue(Note("later"), delay=3600)

    data = jobs_json("purge", "pending", "--yes")

    assert data == {"deleted": 3, "queues": {"critical": 0, "default": 3, "low": 0}}
    assert depths(get_inspector())["pending"] == 0
    assert depths(get_inspector())["scheduled"] == 1
    Noop.enqueue(Note("again"), idempotency_key="k0")  # no DuplicateJob: the key is released


def test_purge__asks_first_and_not_running_tasks(redis_ns: RedisNamespace) -> None:
    Noop.enqueue(Note("x"))
    with pytest.raises(CommandError, match=r"Delete all 1 pending task of .*Pass --yes"):
        jobs("purge", "pending")
    with pytest.raises(CommandError, match=r"invalid choice: 'active'"):
        jobs("purge", "active", "--yes")
    assert depths(get_inspector())["pending"] == 1


def test_inspector_purge__refuses_active(redis_ns: RedisNamespace) -> None:
    with pytest.raises(ValueError, match="cannot be purged"):
        get_inspector().purge("default", State.ACTIVE)


# -- progress -------------------------------------------------------------------------------


def test_purge__a_live_bar_on_a_terminal_with_rich(redis_ns: RedisNamespace) -> None:
    pytest.importorskip("rich")
    Noop.enqueue_many([Note(str(n)) for n in range(30)])
    err = Terminal()

    out, _ = jobs("purge", "pending", "--yes", stderr=err)

    assert out == "Deleted 30 pending tasks of queues critical, default, low.\n"
    assert "deleted" in err.getvalue()
    assert "30/30" in err.getvalue()
    assert "\x1b[" in err.getvalue()  # drawn for a terminal


def test_purge__plain_lines_on_a_terminal_without_rich(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "RICH", False)  # the cli extra not installed
    monkeypatch.setattr(inspector, "BATCH_SIZE", 10)
    Noop.enqueue_many([Note(str(n)) for n in range(30)])

    _, err = jobs("purge", "pending", "--yes", stderr=Terminal())

    assert err.splitlines() == ["deleted: 10/30", "deleted: 20/30", "deleted: 30/30"]


# -- pause, resume, schedules (cancel: test_cancel.py) ---------------------------------------


def test_pause_and_resume__a_queue(redis_ns: RedisNamespace) -> None:
    assert jobs_json("pause", "low") == {"queue": "low", "paused": True}
    assert [q.paused for q in get_inspector().queues()] == [False, False, True]
    assert jobs("resume", "low")[0] == "Queue low is resumed.\n"
    assert not any(q.paused for q in get_inspector().queues())
    with pytest.raises(CommandError, match=r"Unknown queue 'nope'.*critical, default, low"):
        jobs("pause", "nope")


def test_schedules__table_and_json(redis_ns: RedisNamespace, settings: Any) -> None:
    assert jobs("schedules")[0] == "No schedules (JOBS['SCHEDULE'] is empty).\n"
    settings.JOBS = {**settings.JOBS, "SCHEDULE": {"sync": SCHEDULE}}

    (data,) = jobs_json("schedules")
    out, _ = jobs("schedules")

    assert (data["name"], data["job"], data["words"], data["paused"]) == (
        "sync", "probes.Noop", "every 30 seconds", False,
    )  # fmt: skip
    assert data["next_fire_at"] is not None
    assert "sync  probes.Noop  every 30 seconds" in out


# -- errors ---------------------------------------------------------------------------------


def test_every_subcommand__redis_down_is_one_clear_error(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
                     "SCHEDULE": {"sync": SCHEDULE}}  # fmt: skip
    some = "0" * 32
    runs = [("stats",), ("ls", "dead"), ("show", some), ("retry", some), ("pause", "low"),
            ("delete", some, "--yes"), ("resume", "low"), ("purge", "dead", "--yes"),
            ("schedules",), ("retry", "--all-dead", "--yes")]  # fmt: skip
    for run in runs:
        with pytest.raises(CommandError, match=r"did not answer") as caught:
            jobs(*run)
        assert "\n" not in str(caught.value), run


def test_stats__redis_down_still_shows_the_outbox_then_the_error(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
                     "OUTBOX": True}  # fmt: skip
    Noop.enqueue_many([Note("a"), Note("b"), Note("c")])  # rows kept: the test never commits
    out, err = io.StringIO(), io.StringIO()

    with pytest.raises(CommandError, match="did not answer"):
        call_command("jobs", "stats", stdout=out, stderr=err)
    answer = io.StringIO()
    with pytest.raises(CommandError):
        call_command("jobs", "stats", "--json", stdout=answer, stderr=io.StringIO())

    assert out.getvalue().startswith("outbox (on): 3 rows waiting, oldest ")
    data = json.loads(answer.getvalue())
    assert (data["outbox"]["rows"], data["queues"], data["workers"]) == (3, None, None)


def test_jobs_disabled__one_clear_error(settings: Any) -> None:
    settings.JOBS = {**getattr(settings, "JOBS", {}), "REDIS_URL": None}
    with pytest.raises(CommandError, match=r"Jobs are disabled: JOBS\['REDIS_URL'\] is not set"):
        jobs("stats")


def test_manage_py__redis_down_exits_1_with_one_line_and_no_traceback() -> None:
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    done = subprocess.run(
        [sys.executable, "manage.py", "jobs", "ls", "dead", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("CommandError: Redis at redis://127.0.0.1:")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


class Gone(io.StringIO):
    """stdout of `manage.py jobs ... | head` once head has exited."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_left__exit_1_without_a_traceback(redis_ns: RedisNamespace) -> None:
    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("jobs", "stats", stdout=Gone(), stderr=err)
    assert exited.value.code == 1
    assert err.getvalue() == ""


def test_pause_and_resume__each_as_text_and_as_json(redis_ns: RedisNamespace) -> None:
    assert jobs("pause", "low")[0] == (
        "Queue low is paused: workers take no new task from it until resumed.\n"
    )
    assert jobs_json("resume", "low") == {"queue": "low", "paused": False}
    assert not any(q.paused for q in get_inspector().queues())


def test_purge__asks_on_a_terminal_no_keeps_yes_deletes(redis_ns: RedisNamespace) -> None:
    Noop.enqueue_many([Note("a"), Note("b")])

    with pytest.raises(CommandError, match="Not confirmed: nothing was changed"):
        jobs("purge", "pending", stdin=Terminal("n\n"))
    assert depths(get_inspector())["pending"] == 2
    out, err = jobs("purge", "pending", "--queue", "default", stdin=Terminal("yes\n"))

    assert err.startswith("Delete all 2 pending tasks of queue default? ")
    assert "released. [y/N] " in err
    assert out == "Deleted 2 pending tasks of queue default.\n"
    assert depths(get_inspector())["pending"] == 0


def test_retry_all_dead__asks_on_a_terminal_and_says_what_it_did(
    redis_ns: RedisNamespace,
) -> None:
    first, _second = dead(2)
    assert jobs("retry", first)[0] == "Retried: 1 task.\n"

    with pytest.raises(CommandError, match="Not confirmed: nothing was changed"):
        jobs("retry", "--all-dead", stdin=Terminal("\n"))
    out, err = jobs("retry", "--all-dead", stdin=Terminal("y\n"))

    assert err.startswith("Run all 1 dead task of ")
    assert "[y/N] " in err
    assert out.startswith("Retried 1 dead task")
    assert depths(get_inspector())["pending"] == 2
