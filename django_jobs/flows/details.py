"""What the admin and the API show of one run beyond `get_run`: its signals and its links.

A read only (one round trip, as get_run): the run, the signals delivered to it (the meta
hash's `sig:<name>` fields, with their values), and the parent/child links that
ctx.start_child records (also on the Run itself: `run.parent`, `run.children`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django_jobs.flows.events import store
from django_jobs.flows.runs import PARENT_KEY, Run, _run

__all__ = ["PARENT_KEY", "RunDetail", "Signal", "get_run_detail"]


@dataclass(frozen=True)
class Signal:
    """A signal delivered to a run: its name and value (kept until the run's keys expire)."""

    name: str
    value: Any


@dataclass(frozen=True)
class RunDetail:
    """A run with its signals and its parent/child links."""

    run: Run
    signals: list[Signal] = field(default_factory=list)
    parent: str = ""
    children: list[str] = field(default_factory=list)


def get_run_detail(call_id: str) -> RunDetail | None:
    """The run of a call with its signals, or None if there is none."""
    (state,) = store().read([call_id])
    if state is None:
        return None
    signals = []
    for key, raw in sorted(state.meta.items()):
        if key.startswith("sig:"):
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
            signals.append(Signal(key[4:], value))
    run = _run(state)
    return RunDetail(run, signals, run.parent, run.children)
