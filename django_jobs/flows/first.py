"""`ctx.first_of(name, signals, timeout)`: whichever of several signals, or the time, first.

The run records `first:<name>` (the signals, the deadline) and, in its meta hash, `await:<sig>`
for each signal, so that flow_signal knows which record a signal is for. It is settled by one
script either way:

- the time first: the replay's write of "timed_out" is refused if any of the signals is there
  (flow_write's unless fields), and once written, flow_signal refuses each signal ("late");
- a signal first: flow_signal stores it only while the record still waits; the replay that
  finds one or more records the earliest (flow_signal numbers signals as they arrive) as the
  winner, and every later signal of the record is refused.

Signals sent before the run reaches first_of are kept for it: the earliest of them wins.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from django_jobs.conf import to_seconds
from django_jobs.flows.errors import FlowError, ReplayLost, Suspend

if TYPE_CHECKING:
    from django_jobs.flows.context import Context


class Winner(NamedTuple):
    """What first_of answers: the signal that came first and its value, or (None, None)."""

    signal: str | None
    value: Any

    @property
    def timed_out(self) -> bool:
        """Whether the time came first."""
        return self.signal is None


def first_of(
    ctx: Context, name: str, signals: list[str], timeout: timedelta | float | None
) -> Winner:
    if not signals or len(set(signals)) != len(signals):
        raise FlowError(f"first_of {name!r}: give one or more signals, each once: {signals!r}")
    if any(not isinstance(s, str) or not s or "\n" in s for s in signals):
        raise FlowError(f"first_of {name!r}: signal names are non-empty one-line str")
    field = f"first:{name}"
    rec = ctx._record(field)
    if rec.get("state") == "received":
        winner = str(rec["signal"])
        return Winner(winner, json.loads(ctx._meta[f"sig:{winner}"]))
    if rec.get("state") == "timed_out":
        return Winner(None, None)
    now = time.time()
    if not rec:
        rec = {"state": "waiting", "started_at": now, "signals": signals}
        if timeout is not None:
            rec["deadline"] = now + to_seconds(timeout)
    awaits = {f"await:{s}": field for s in signals}
    unless = "\n".join(f"sig:{s}" for s in signals)
    if not _present(ctx, signals):
        deadline = rec.get("deadline")
        if deadline is None or deadline > now:
            meta = {"status": "waiting", **awaits}
            answer = ctx.write("release", status={field: rec}, meta=meta, unless_signal=unless)
            if answer == "ok":
                raise Suspend(deadline)
        else:
            rec.update(state="timed_out", finished_at=now)
            if ctx.write(status={field: rec}, meta=awaits, unless_signal=unless) == "ok":
                return Winner(None, None)
        _reload(ctx, signals)  # one arrived meanwhile
    present = _present(ctx, signals)
    winner = min(present, key=lambda s: _arrival(ctx, s))
    rec.update(state="received", signal=winner, finished_at=time.time())
    ctx.write(status={field: rec}, meta=awaits)  # the winner sticks, whatever comes after
    return Winner(winner, json.loads(ctx._meta[f"sig:{winner}"]))


def _present(ctx: Context, signals: list[str]) -> list[str]:
    return [s for s in signals if f"sig:{s}" in ctx._meta]


def _arrival(ctx: Context, signal: str) -> tuple[int, int]:
    raw = ctx._meta.get(f"sigseq:{signal}", "")
    return (0, int(raw)) if raw.isdigit() else (1, 0)  # a signal stored before numbering: last


def _reload(ctx: Context, signals: list[str]) -> None:
    (state,) = ctx.store.read([ctx.call_id])
    if state is None:
        raise ReplayLost()
    for s in signals:
        for field in (f"sig:{s}", f"sigseq:{s}"):
            if field in state.meta:
                ctx._meta[field] = state.meta[field]
    if not _present(ctx, signals):
        raise ReplayLost()
