"""The subcommands that change things: retry, delete, cancel, pause, resume, purge.

Destructive ones ask first (`confirm`, skipped with --yes); bulk ones show their progress on
stderr (`progress`). Each reports what it did, and exits non-zero naming what it could not do.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from django.core.management.base import CommandError

from django_jobs.canceling import TOOK, cancel_task, said
from django_jobs.cli.confirm import confirm
from django_jobs.cli.progress import Advance, progress
from django_jobs.cli.reading import check_id, not_found, queues_of
from django_jobs.cli.registry import Session, Subcommand, arg, subcommand
from django_jobs.exceptions import TaskRunning
from django_jobs.inspector import RETRY_RULE, Inspector
from django_jobs.keys import State

#: The states `purge` empties: all but active (running tasks finish or time out).
PURGEABLE = tuple(state for state in State.ALL if state != State.ACTIVE)

#: Why an action found no task: it moved out of reach between the lookup and the action.
GONE = "it is gone: it finished and expired, or was deleted, meanwhile."
#: An action on one task: None when done, else why not.
Act = Callable[[Inspector, str, str], str | None]

IDS = arg("ids", nargs="*", metavar="id", help="task ids")
ALL_DEAD = arg("--all-dead", action="store_true", help="every dead task (of --queue, or all)")
QUEUE = arg("--queue", help="with --all-dead: one queue (default: every configured queue)")
#: The arguments of an action on tasks by id or on every dead one.
ON_TASKS = (IDS, ALL_DEAD, QUEUE)
#: What `delete --all-dead` and `purge` ask first.
DELETE_ALL = "Delete all {count} of {queues}? Their idempotency keys are released."


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _on_ids(session: Session, ids: list[str], verb: str, act: Act) -> None:
    """Act on each task of ids (any queue), with progress for many; report, and exit non-zero
    naming each id not acted on and why."""
    for task_id in ids:
        check_id(task_id)
    insp = session.inspector
    located = insp.locate(ids)
    done: list[str] = []
    failed: dict[str, str] = {}
    bar: AbstractContextManager[Advance] = (
        progress(session.err, verb, len(ids)) if len(ids) > 1 else nullcontext(lambda n: None)
    )
    with bar as advance:
        for task_id in ids:
            queue = located.get(task_id)
            why = not_found(task_id) if queue is None else act(insp, queue, task_id)
            if why is None:
                done.append(task_id)
            else:
                failed[task_id] = why
            advance(1)
    session.emit(
        {verb: done, "failed": failed}, [f"{verb.capitalize()}: {plural(len(done), 'task')}."]
    )
    if failed:
        raise CommandError("\n".join(f"{task_id}: {why}" for task_id, why in failed.items()))


def _on_states(
    session: Session, options: dict[str, Any], state: str, verb: str, question: str
) -> None:
    """Act on every task in a state of --queue (or every queue): ask first, with progress."""
    queues = queues_of(options["queue"])
    insp = session.inspector
    counts = {q.name: q.count(state) for q in insp.queues() if q.name in queues}
    total = sum(counts.values())
    names = f"queue {queues[0]}" if len(queues) == 1 else f"queues {', '.join(queues)}"
    if not total:
        session.emit({verb: 0, "queues": dict.fromkeys(queues, 0)},
                     [f"No {state} tasks in {names}: nothing to do."])  # fmt: skip
        return
    confirm(session, question.format(count=plural(total, f"{state} task"), queues=names))
    done: dict[str, int] = {}
    with progress(session.err, verb, total) as advance:
        for queue in queues:
            if verb == "retried":
                done[queue] = insp.retry_all_dead(queue, advance)
            else:
                done[queue] = insp.purge(queue, state, advance)
    count = sum(done.values())
    session.emit({verb: count, "queues": done},
                 [f"{verb.capitalize()} {plural(count, f'{state} task')} of {names}."])  # fmt: skip


def _retry(insp: Inspector, queue: str, task_id: str) -> str | None:
    if insp.retry(queue, task_id):
        return None
    task = insp.task(queue, task_id)
    return f"{RETRY_RULE} (it is {task.state})." if task else GONE


def _delete(insp: Inspector, queue: str, task_id: str) -> str | None:
    try:
        return None if insp.delete(queue, task_id) else GONE
    except TaskRunning as exc:
        return str(exc)


def _ids_or_all_dead(options: dict[str, Any]) -> bool:
    """Whether the run is --all-dead; a CommandError unless exactly one of ids and it."""
    if options["all_dead"] and options["ids"]:
        raise CommandError("Give task ids or --all-dead, not both.")
    if not options["all_dead"] and not options["ids"]:
        raise CommandError("Give one or more task ids, or --all-dead.")
    if options["queue"] and not options["all_dead"]:
        raise CommandError("--queue goes with --all-dead (an id finds its own queue).")
    return bool(options["all_dead"])


def _on_ids_or_dead(
    session: Session, options: dict[str, Any], verb: str, act: Act, dead: str, ids: str = ""
) -> None:
    """With --all-dead, act on every dead task of --queue (or every queue), asking dead first;
    else act on each task id, asking ids first if given ({count}: how many tasks)."""
    if _ids_or_all_dead(options):
        _on_states(session, options, State.DEAD, verb, dead)
        return
    if ids:
        confirm(session, ids.format(count=plural(len(options["ids"]), "task")))
    _on_ids(session, options["ids"], verb, act)


@subcommand("run dead or retrying tasks now (dead ones with a fresh budget of attempts)",
            *ON_TASKS, destructive=True)  # fmt: skip
def retry(session: Session, options: dict[str, Any]) -> None:
    question = "Run all {count} of {queues} again now, each with a fresh budget of attempts?"
    _on_ids_or_dead(session, options, "retried", _retry, question)


@subcommand("delete tasks that are not running (their idempotency keys are released)",
            *ON_TASKS, destructive=True)  # fmt: skip
def delete(session: Session, options: dict[str, Any]) -> None:
    _on_ids_or_dead(session, options, "deleted", _delete, DELETE_ALL,
                    "Delete {count}? Their idempotency keys are released.")  # fmt: skip


@subcommand("cancel a task: a waiting one now, a running one is asked to stop (ends canceled)",
            arg("id", help="the task id"), destructive=True)  # fmt: skip
def cancel(session: Session, options: dict[str, Any]) -> None:
    task_id = options["id"]
    check_id(task_id)
    task = session.inspector.find(task_id)
    if task is None:
        raise CommandError(not_found(task_id))
    confirm(session, f"Cancel the {task.state} task {task_id} ({task.job or 'undecodable'}) of "
                     f"queue {task.queue}?")  # fmt: skip
    answer = cancel_task(session.inspector.broker, task_id, task.queue)
    data = {"id": task_id, "queue": task.queue, "outcome": answer.outcome.value,
            "state": answer.state}  # fmt: skip
    if answer.outcome in TOOK:
        session.emit(data, [said(task_id, answer)])
        return
    session.emit(data, [])  # --json: the answer too, then the error
    raise CommandError(said(task_id, answer))


@subcommand("stop workers taking new tasks from a queue (running ones finish)",
            arg("queue", help="a queue of JOBS['QUEUES']"))  # fmt: skip
def pause(session: Session, options: dict[str, Any]) -> None:
    session.inspector.pause(options["queue"])
    text = f"Queue {options['queue']} is paused: workers take no new task from it until resumed."
    session.emit({"queue": options["queue"], "paused": True}, [text])


@subcommand("let workers take tasks from a paused queue again",
            arg("queue", help="a queue of JOBS['QUEUES']"))  # fmt: skip
def resume(session: Session, options: dict[str, Any]) -> None:
    session.inspector.resume(options["queue"])
    session.emit({"queue": options["queue"], "paused": False},
                 [f"Queue {options['queue']} is resumed."])  # fmt: skip


@subcommand(
    "delete every task in a state (all but active), of --queue or of every queue",
    arg("state", choices=PURGEABLE, help="the state to empty"),
    arg("--queue", help="one queue (default: every configured queue)"),
    destructive=True,
)
def purge(session: Session, options: dict[str, Any]) -> None:
    _on_states(session, options, options["state"], "deleted", DELETE_ALL)


SUBCOMMANDS: tuple[Subcommand, ...] = (retry, delete, cancel, pause, resume, purge)
