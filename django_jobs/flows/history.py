"""The order of a run's steps, to catch a replay that takes another path than its history.

Every named record of a run (a step, sleep, wait, parallel, first_of, child) is written with
its position in the run (`seq`: 0, 1, 2, ... in the order the flow's code asks for them). A
replay counts the names it asks for; asking at position p for a record other than the one the
history holds at p is a NonDeterministicFlow naming both, caught before anything runs or is
written. `ctx.version()` gates take no position: adding one does not shift the others.
Records written before positions existed (no `seq`) are not checked.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from django_jobs.flows.errors import FlowError, NonDeterministicFlow

if TYPE_CHECKING:
    from django_jobs.flows.context import Context

#: The kinds of status records that take a position (items of a parallel do not: their
#: parallel does; nor do version gates).
POSITIONED = ("step", "sleep", "wait", "parallel", "first", "child")


class History:
    """The positions a run's records were written at, and the replay's count so far."""

    def __init__(self, flow: str, call_id: str, status: dict[str, str]) -> None:
        self.flow = flow
        self.call_id = call_id
        self.at: dict[int, str] = {}
        self.of: dict[str, int] = {}
        for field, raw in status.items():
            if field.partition(":")[0] not in POSITIONED or '"seq":' not in raw:
                continue
            try:
                seq = json.loads(raw).get("seq")
            except (ValueError, AttributeError):
                continue
            if isinstance(seq, int):
                self.at[seq] = field
                self.of[field] = seq
        self.next = 0
        #: Positions of the records this replay asked for (written with their record).
        self.asked: dict[str, int] = {}
        #: The violation met, if any: the engine fails the run with it even if the flow's
        #: code caught it.
        self.violation: NonDeterministicFlow | None = None

    def claim(self, field: str) -> None:
        """Take the next position for field, or raise NonDeterministicFlow (again for every
        later record, once met: nothing runs past a violation, even if the code caught it)."""
        if self.violation is not None:
            raise self.violation
        position = self.next
        self.next += 1
        recorded = self.at.get(position)
        if recorded is None and field in self.of:
            # asked for earlier than it ran: nothing recorded here yet
            recorded = f"(nothing, and it recorded that one at position {self.of[field]})"
        if recorded is not None and recorded != field:
            self.violation = NonDeterministicFlow(
                self.flow, self.call_id, position, field, recorded
            )
            raise self.violation
        self.asked[field] = position

    def passed(self) -> bool:
        """Whether the run's history goes past the replay's current position (a gate met here
        for the first time was not in the code when the run went by)."""
        return any(seq >= self.next for seq in self.at)


def gate(ctx: Context, name: str, latest: int) -> int:
    """ctx.version(name, latest): the recorded answer, or the one recorded now (`latest`, or
    the run's start version if its history went past this point without the gate)."""
    if not isinstance(name, str) or not name:
        raise FlowError(f"a version gate's name must be a non-empty str, got {name!r}")
    if not isinstance(latest, int) or isinstance(latest, bool) or latest < 1:
        raise FlowError(f"version {name!r}: latest must be an int, 1 or more: {latest!r}")
    field = f"version:{name}"
    rec = ctx._record(field)
    if isinstance(rec.get("version"), int):
        return int(rec["version"])
    chosen = min(latest, ctx.run_version) if ctx.history.passed() else latest
    now = time.time()
    ctx.write(status={field: {"state": "done", "version": chosen, "started_at": now,
                              "finished_at": now}})  # fmt: skip
    return chosen
