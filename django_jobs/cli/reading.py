"""The subcommands that read: stats, ls, show, schedules."""

from __future__ import annotations

import json
import re
from typing import Any

from django.core.management.base import CommandError

from django_jobs.backends.outbox import Overview, overview
from django_jobs.cli.registry import Session, Subcommand, arg, subcommand
from django_jobs.cli.render import duration, shorten, table, when
from django_jobs.conf import get_settings
from django_jobs.conf.redact import REDACTED, redacted
from django_jobs.exceptions import BrokerUnavailable, UnknownQueue
from django_jobs.inspector import TIME_FIELDS, TaskInfo
from django_jobs.keys import State, today

#: A task id as enqueue makes them: uuid4().hex.
TASK_ID = re.compile(r"[0-9a-f]{32}")
#: Task records `ls` reads at most to fill its page when --job filters (then it says so).
SCAN_LIMIT = 10_000


def queues_of(option: str | None) -> tuple[str, ...]:
    """The queues a --queue option names: that one (checked), or every configured queue."""
    configured = get_settings().queues
    if option is None:
        return configured
    if option not in configured:
        raise UnknownQueue(option, configured)
    return (option,)


def find(session: Session, task_id: str) -> TaskInfo:
    """The task with this id in any configured queue, or a CommandError saying what to do."""
    check_id(task_id)
    info = session.inspector.find(task_id)
    if info is None:
        raise CommandError(not_found(task_id))
    return info


def check_id(task_id: str) -> None:
    if not TASK_ID.fullmatch(task_id):
        raise CommandError(f"{task_id!r} is not a task id: one is 32 lowercase hex digits.")


def not_found(task_id: str) -> str:
    queues = ", ".join(get_settings().queues)
    return (
        f"No task {task_id} in any queue ({queues}): it finished and expired, or was deleted. "
        f"`manage.py jobs ls <state>` lists the tasks there are."
    )


def outbox_lines(outbox: Overview | None, on: bool) -> list[str]:
    """The outbox as `stats` prints it: depth, oldest age, held rows, last relay."""
    if outbox is None:
        return ["outbox: its table cannot be read (run manage.py migrate)"]
    state = "on" if on else "off (JOBS['OUTBOX'])"
    relayed = f"{when(outbox.relayed_at)} UTC by {outbox.relayed_by}" if outbox.relayed_at else ""
    lines = [
        f"outbox ({state}): {outbox.rows} rows waiting, oldest {duration(outbox.oldest_age)}, "
        f"{outbox.held} held; last relay {relayed or 'never'}"
    ]
    if outbox.held_error:
        lines.append(f"  oldest held: {shorten(outbox.held_error, 200)}")
    return lines


@subcommand("queues, workers and the outbox at a glance (the admin's Queues page)")
def stats(session: Session, options: dict[str, Any]) -> None:
    insp = session.inspector
    # The outbox is in the database: shown even when Redis cannot be read (then exit 1).
    outbox, on = overview(), get_settings().outbox
    data: dict[str, Any] = {"day": today(), "queues": None, "workers": None, "outbox": outbox,
                            "outbox_on": on}  # fmt: skip
    try:
        queues, workers = insp.queues(), insp.workers()
    except BrokerUnavailable:
        session.emit(data, outbox_lines(outbox, on))
        raise
    data.update(queues=queues, workers=workers)
    # Parked beside pending: pending tasks waiting for a slot of their job type's limit.
    states = list(State.ALL)
    states.insert(states.index(State.PENDING) + 1, "parked")
    headers = ["queue", "paused", *states, "done today", "failed today"]
    rows = [
        [q.name, "yes" if q.paused else "no", *(getattr(q, s) for s in states),
         q.processed_today, q.failed_today]
        for q in queues
    ]  # fmt: skip
    busy, slots = sum(len(w.tasks) for w in workers), sum(w.concurrency for w in workers)
    lines = table(headers, rows)
    lines.append(f"\nworkers: {len(workers)} live, {busy} of {slots} slots busy")
    session.emit(data, lines + outbox_lines(outbox, on))


@subcommand(
    "list the tasks in a state, newest first",
    arg("state", choices=State.ALL, help="the state to list"),
    arg("--queue", help="one queue (default: every configured queue)"),
    arg("--job", help="only tasks of this job (its registered name)"),
    arg("--limit", type=int, default=50, help="at most this many tasks (default 50)"),
    arg("--oldest", action="store_true", help="oldest first"),
)
def ls(session: Session, options: dict[str, Any]) -> None:
    state, limit = options["state"], options["limit"]
    if limit < 1:
        raise CommandError("--limit must be 1 or more.")
    queues = queues_of(options["queue"])
    items: list[TaskInfo] = []
    offsets, scanned, total = None, 0, 0
    while len(items) < limit and scanned < SCAN_LIMIT:
        found = session.inspector.list_tasks(
            state, queues, offsets=offsets, job=options["job"], per_page=limit - len(items),
            newest_first=not options["oldest"],
        )  # fmt: skip
        items += found.items
        offsets, scanned, total = found.next_offsets, scanned + found.scanned, found.total
        if offsets is None:
            break
    listed = [{k: v for k, v in vars_of(t).items() if k not in ("traceback", "raw")} for t in items]
    data = {"state": state, "queues": queues, "total": total, "more": offsets is not None,
            "tasks": listed}  # fmt: skip
    field = TIME_FIELDS[state]
    headers = ["id", "queue", "job", "attempts", f"{field.removesuffix('_at')} (UTC)", "error"]
    rows = [[t.id, t.queue, t.job or "(undecodable)", f"{t.attempts}/{t.max_attempts or '?'}",
             when(getattr(t, field)), shorten(t.error, 60)] for t in items]  # fmt: skip
    lines = table(headers, rows) if items else [f"No {state} tasks in {', '.join(queues)}."]
    if items:
        more = " (more: --limit)" if offsets is not None else ""
        lines.append(f"{len(items)} shown of {total} {state}{more}")
    session.emit(data, lines)


def vars_of(task: TaskInfo) -> dict[str, Any]:
    """A task's fields for --json, a sensitive job's payload and idempotency key redacted."""
    fields = {name: getattr(task, name) for name in TaskInfo.__slots__}
    for name in ("payload", "idempotency_key"):
        fields[name] = redacted(fields[name], task.sensitive)
    return fields


@subcommand("one task in full: payload, attempts, times, last error and traceback",
            arg("id", help="the task id"))  # fmt: skip
def show(session: Session, options: dict[str, Any]) -> None:
    task = find(session, options["id"])
    lines = [f"{name:<12} {value}" for name, value in (
        ("id", task.id), ("queue", task.queue), ("state", task.state),
        ("job", task.job or "-"),
        ("attempts", f"{task.attempts} failed of {task.max_attempts or '?'}, "
                     f"{task.crashes} crashes"),
        ("idempotency", redacted(task.idempotency_key, task.sensitive) or "-"),
        *((f.removesuffix("_at"), when(getattr(task, f)) + " UTC")
          for f in ("enqueued_at", "started_at", "next_at", "failed_at", "died_at",
                    "completed_at") if getattr(task, f)),
        ("error", task.error or "-"),
    )]  # fmt: skip
    if task.decode_error:
        lines += [f"{'record':<12} cannot be decoded: {task.decode_error}", task.raw]
    elif task.sensitive:
        lines += ["payload", f"  {REDACTED}"]
    else:
        lines += ["payload", *("  " + ln for ln in json.dumps(task.payload, indent=2).split("\n"))]
    if task.traceback:
        lines += ["traceback", *("  " + ln for ln in task.traceback.rstrip().split("\n"))]
    session.emit(vars_of(task), lines)


@subcommand("the configured schedules with their next and last fire")
def schedules(session: Session, options: dict[str, Any]) -> None:
    found = session.inspector.schedules()
    rows = [[s.name, s.job, s.words, s.timezone, when(s.next_fire_at), when(s.last_fire_at),
             "yes" if s.paused else "no"] for s in found]  # fmt: skip
    headers = ["name", "job", "schedule", "timezone", "next (UTC)", "last (UTC)", "paused"]
    lines = table(headers, rows) if found else ["No schedules (JOBS['SCHEDULE'] is empty)."]
    session.emit(found, lines)


SUBCOMMANDS: tuple[Subcommand, ...] = (stats, ls, show, schedules)
