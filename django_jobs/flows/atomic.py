"""`ctx.step(name, fn, atomic=True)`: a step whose database effect happens once.

The step's function runs inside one transaction (the default database) that also inserts the
step's ProcessedTask row (idempotency.claim, key `flow:<call>:<nonce>:<step>`: the nonce is
the run's, written by flow_start, so that a call id reused once the run expired, before its
rows did, is a new run's key): the row exists if and
only if the step's ORM writes committed. Before that commit, still inside the transaction,
the replay writes the step's value to the call's meta hash (`pv:<step>`, under its epoch: a
replay fenced out writes nothing and its transaction rolls back). So:

- killed before the commit: no row, nothing committed; the step runs again;
- killed after the commit, before the step is recorded done in Redis: the next replay finds
  the row, takes the value written before the commit, and records the step done without
  running it again;
- a replay taking over while the first one's transaction is still open: its insert of the key
  waits for that transaction (PostgreSQL; SQLite has one writer), then finds the key taken
  and takes the value the first one wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction

from django_jobs.broker.flows import dumps
from django_jobs.flows.errors import ReplayLost, StepFailed
from django_jobs.flows.steps import refuse_non_json
from django_jobs.idempotency import MAX_KEY, claim
from django_jobs.models import ProcessedTask

if TYPE_CHECKING:
    from django_jobs.flows.context import Context

#: Test-only: called with (ctx, step name) after an atomic step's commit and before its
#: Redis record (the acceptance test kills the worker there). None in production.
after_commit: Callable[[Context, str], None] | None = None


def step_key(call_id: str, name: str, nonce: str = "") -> str:
    """The ProcessedTask key of an atomic step of the run with that nonce (meta field `nonce`;
    a run started before nonces has none): a digest when it would be too long."""
    key = f"flow:{call_id}:{nonce}:{name}" if nonce else f"flow:{call_id}:{name}"
    if len(key) > MAX_KEY:
        key = f"flow:{hashlib.sha256(key.encode()).hexdigest()}"
    return key


def committed_value(ctx: Context, name: str) -> tuple[Any] | None:
    """(value,) if the step's transaction has committed, else None."""
    if not ProcessedTask.objects.filter(
        key=step_key(ctx.call_id, name, ctx._meta.get("nonce", ""))
    ).exists():
        return None
    return (_pending(ctx, name, reload=False),)


def run_atomic(
    ctx: Context,
    name: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """fn(*args, **kwargs) in one transaction with the step's row and its value in Redis."""
    with transaction.atomic():
        if not claim(step_key(ctx.call_id, name, ctx._meta.get("nonce", ""))):
            # Another replay of this call committed it while we waited for its transaction.
            return _pending(ctx, name, reload=True)
        value = fn(*args, **kwargs)
        if refuse_non_json(value):
            transaction.set_rollback(True)  # the step fails (context.step says why)
            return value
        ctx.write(meta={f"pv:{name}": dumps(value)})
    if after_commit is not None:
        after_commit(ctx, name)
    return value


def _pending(ctx: Context, name: str, *, reload: bool) -> Any:
    field = f"pv:{name}"
    if reload or field not in ctx._meta:
        (state,) = ctx.store.read([ctx.call_id])
        if state is None:
            raise ReplayLost()
        if field not in state.meta:
            raise StepFailed(
                name, "its transaction committed, but its value is not in Redis (was the "
                "call's meta hash deleted by hand?)",
            )  # fmt: skip
        ctx._meta[field] = state.meta[field]
    return json.loads(ctx._meta[field])
