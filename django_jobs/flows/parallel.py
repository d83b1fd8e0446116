"""`ctx.parallel`: a fan-out of steps with a concurrency limit, in one replay.

The items run in a pool of `limit` threads of the replaying child; each item's value is
recorded (a compare-and-set under the replay's epoch) as it finishes, so a replay after a
crash runs only the items not recorded. No item wakes the flow: the replay that fans out
waits for the pool and goes on, so a fan-out of 1,000 is one replay, not 1,000 (and never more
than `limit` items at once). A failed item is retried after its backoff by a later replay
(a timer event), its finished siblings memoised; one whose attempts are spent fails the fan-out
with StepFailed naming it (and is never run again: a replay that finds it recorded failed, its
worker having died before the fan-out's failure was written, fails the fan-out at once).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import connections

from django_jobs.broker.flows import dumps
from django_jobs.flows.errors import Canceled, FlowError, ReplayLost, StepFailed
from django_jobs.flows.steps import Backoff, delay_after, refuse_non_json

if TYPE_CHECKING:
    from django_jobs.flows.context import Context


def run_parallel(
    ctx: Context,
    name: str,
    calls: Sequence[Callable[[], Any] | tuple[Any, ...]],
    limit: int,
    max_attempts: int,
    backoff: Backoff,
) -> list[Any]:
    if not isinstance(limit, int) or limit < 1:
        raise FlowError(f"parallel {name!r}: limit must be a whole number, 1 or more: {limit!r}")
    field = f"parallel:{name}"
    group = ctx._record(field)
    if group.get("state") == "done":
        return [json.loads(ctx._meta[f"v:{name}#{i}"]) for i in range(group["n"])]
    if group.get("state") == "failed":
        raise StepFailed(name, group.get("error", ""))
    now = time.time()
    items = {i: ctx._record(f"item:{name}#{i}") for i in range(len(calls))}
    spent = [i for i, rec in items.items() if rec.get("state") == "failed"]
    if spent:  # recorded by a replay that died before it failed the group: fail it now
        _fail(ctx, field, {"n": len(calls), "limit": limit, "started_at": now}, spent, items)
    todo = [i for i, rec in items.items() if rec.get("state") != "done"]
    waiting = [items[i]["next_at"] for i in todo if items[i].get("next_at", 0) > now]
    if waiting and len(waiting) == len(todo):
        raise ctx.suspend({}, "sleeping", min(waiting))
    group = {"state": "running", "n": len(calls), "limit": limit, "started_at": now}
    ctx.write(status={field: group})
    lock = threading.Lock()  # one write at a time: the context's caches are not thread-safe
    problem: list[BaseException] = []

    def item(i: int) -> None:
        rec = items[i]
        rec.update(attempts=rec.get("attempts", 0) + 1, started_at=time.time())
        key = f"item:{name}#{i}"
        try:
            value = _call(calls[i])
            error = refuse_non_json(value)
        except Exception as exc:
            value, error = None, f"{type(exc).__name__}: {exc}"[:1000]
        rec["finished_at"] = time.time()
        meta = {}
        if not error:
            rec.update(state="done")
            meta = {f"v:{name}#{i}": dumps(value)}
        else:
            failures = rec.get("failures", 0) + 1
            failed = failures >= max_attempts or error.startswith(("is a ", "does not survive"))
            rec.update(state="failed" if failed else "retrying", failures=failures, error=error)
            if not failed:
                rec["next_at"] = time.time() + delay_after(backoff, failures)
        with lock:
            if not problem:
                try:
                    ctx.write(status={key: rec}, meta=meta)
                except (ReplayLost, Canceled) as exc:
                    problem.append(exc)
        connections.close_all()  # this thread's own, if the item opened any

    ready = [i for i in todo if items[i].get("next_at", 0) <= now]
    with ThreadPoolExecutor(max_workers=limit, thread_name_prefix=f"flow-{name}") as pool:
        running: set[Future[None]] = set()
        for i in ready:
            if problem or ctx.over_budget():
                break  # a fresh event goes on with the rest (below)
            if len(running) >= limit:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
            running.add(pool.submit(item, i))
        for f in running:
            f.result()
    if problem:
        raise problem[0]
    failed = [i for i in todo if items[i].get("state") == "failed"]
    if failed:
        _fail(ctx, field, group, failed, items)
    if any(not items[i].get("state") for i in todo):  # handed over half-way (the budget)
        raise ctx.suspend({}, "running", time.time())
    retrying = [items[i]["next_at"] for i in todo if items[i].get("state") == "retrying"]
    if retrying:
        raise ctx.suspend({}, "sleeping", min(retrying))
    group.update(state="done", finished_at=time.time())
    ctx.write(status={field: group})
    return [json.loads(ctx._meta[f"v:{name}#{i}"]) for i in range(len(calls))]


def _fail(
    ctx: Context,
    field: str,
    group: dict[str, Any],
    failed: Sequence[int],
    items: dict[int, dict[str, Any]],
) -> NoReturn:
    """Record the fan-out failed by its first failed item, and raise StepFailed naming it."""
    group.update(state="failed", error=f"item {failed[0]}: {items[failed[0]].get('error', '')}")
    ctx.write(status={field: group})
    raise StepFailed(field.partition(":")[2], group["error"])


def _call(item: Any) -> Any:
    """Run one item: a function of no arguments, or a (function, arg, ...) tuple."""
    if isinstance(item, tuple) and item and callable(item[0]):
        return item[0](*item[1:])
    return item()
