"""Outside a flow: signals, cancel, and the run's state (get_run, list_runs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, overload

from django.db import transaction
from typing_extensions import TypeVar

from django_jobs.broker.flows import CallState, dumps
from django_jobs.flows.errors import FlowError
from django_jobs.flows.events import outbox_applies, publish, store
from django_jobs.flows.signals import Signal, signal_name
from django_jobs.flows.steps import refuse_non_json

if TYPE_CHECKING:
    from django_jobs.flows.base import Flow

#: The type of a run's output: Any for the module's get_run, the flow's for Flow.get_run.
O = TypeVar("O", default=Any)  # noqa: E741
T = TypeVar("T")
#: The metadata key naming a run's parent call (written by ctx.start_child).
PARENT_KEY = "parent_call_id"
#: The metadata key naming the parent's step that waits for this child (awaited children).
PARENT_STEP_KEY = "parent_step"

#: The statuses of a run, as get_run and list_runs report them.
STATUSES = ("running", "sleeping", "waiting", "succeeded", "failed", "canceled")
FINISHED = ("succeeded", "failed", "canceled")


def send_signal(
    call_id: str, name: str | Signal[Any], value: Any = None, *, outbox: bool | None = None
) -> bool:
    """Deliver the signal `name` (a str, or a Signal declared on the flow) to a call; True if
    it was taken. `Flow.send_signal(call_id, Flow.signal, value)` is the typed spelling.

    The first signal of a name wins (later ones: False); one sent before the flow waits for it
    is kept for that wait; one sent after that wait timed out is False, and no replay ever
    turns that timed-out wait into a received one. False too for a call that has ended or
    does not exist. A duplicate of the same value that wakes the flow still waiting for it (a
    retry of a send whose wake-up failed) is True. The value must survive JSON (refused here,
    with FlowError).

    Under the outbox (JOBS["OUTBOX"], use_outbox()) inside atomic(), the signal travels in its
    event's outbox row (dropped by a rollback, kept with Redis down) and a worker delivers it:
    True at once, meaning "written for delivery"; a late or duplicate one is then logged by the
    worker. Outside atomic() there is nothing to roll back: it is delivered now, as answered.
    `outbox=False` delivers it now in any case (the admin and the API: an operator's signal is
    no part of the request's transaction, and wants its real answer).
    """
    name = signal_name(name)
    problem = refuse_non_json(value)
    if problem:
        raise FlowError(f"signal {name!r}: its value {problem}")
    if outbox is not False and outbox_applies() and transaction.get_connection().in_atomic_block:
        publish(call_id, "", signal={"name": name, "value": value})
        return True
    return deliver(call_id, name, dumps(value)) in ("wake", "kept", "rewake")


def deliver(call_id: str, name: str, value_json: str) -> str:
    """flow_signal, then the wake-up event when the flow waits for it: flow_signal's answer,
    or "rewake" for a duplicate of the same value (a retry) that woke a flow still waiting for
    it (one of another value wakes it too, and stays "duplicate": the first won)."""
    s = store()
    answer = s.signal(call_id, name, value_json)
    if answer not in ("wake", "duplicate"):
        return answer
    (state,) = s.read([call_id])
    if state is None:
        return answer
    if answer == "duplicate":
        # A duplicate wakes a flow still waiting for it too: the first send may have failed
        # between its script and its event (Redis unreachable), and been retried. The wait is
        # found as flow_signal finds it: wait:<name>, or the first_of's field await:<name>.
        wait = state.status.get(f"wait:{name}")
        if wait is None and state.meta.get(f"await:{name}"):
            wait = state.status.get(state.meta[f"await:{name}"])
        if state.meta.get("status") != "waiting" or '"state":"waiting"' not in (wait or ""):
            return answer
        if state.meta.get(f"sig:{name}") == value_json:  # a retry of that send: it wakes it
            answer = "rewake"
    publish(call_id, state.meta.get("flow", ""))
    return answer


def cancel(call_id: str, reason: str = "") -> bool:
    """Cancel a call: a sleeping or waiting run ends now (status "canceled"); a running one is
    asked to stop (its running step is interrupted, and the run ends as canceled). False for a
    call that has ended or does not exist.

    The children it started (ctx.start_child, awaited or not) are canceled with it, and theirs:
    now, and again by the parent's replay when it ends as canceled (a child started meanwhile).
    """
    s = store()
    answer = s.cancel(call_id, reason or "canceled")
    if answer in ("canceled", "requested"):
        cancel_children(call_id, reason or "canceled")
    if answer == "canceled":  # ended now, with no replay to tell its parent
        (state,) = s.read([call_id])
        if state is not None:
            notify_parent(state)
    return answer in ("canceled", "requested")


def cancel_children(call_id: str, reason: str) -> None:
    """Cancel every child a call started (and theirs, through cancel)."""
    (state,) = store().read([call_id])
    for child in [] if state is None else _children(state.status):
        cancel(child, f"parent {call_id} canceled: {reason}")


def _children(status: dict[str, str]) -> list[str]:
    out = []
    for key, raw in status.items():
        if key.startswith("child:"):
            try:
                child = json.loads(raw).get("call_id")
            except (ValueError, AttributeError):
                continue
            if isinstance(child, str):
                out.append(child)
    return sorted(out)


def notify_parent(state: CallState) -> None:
    """Tell the parent waiting for this child (ctx.start_child) that it ended: the signal
    `child:<its step>` with the child's status and output or error."""
    try:
        metadata = json.loads(state.meta.get("metadata") or "{}")
    except ValueError:
        return
    parent, step = metadata.get(PARENT_KEY), metadata.get(PARENT_STEP_KEY)
    if not (isinstance(parent, str) and isinstance(step, str)):
        return
    status = state.meta.get("status", "")
    value: dict[str, Any] = {"status": status, "error": state.meta.get("error", "")}
    if status == "succeeded":
        value["output"] = json.loads(state.meta.get("output") or "null")
    send_signal(parent, f"child:{step}", value)


def _at(value: Any) -> datetime | None:
    try:
        return None if value in (None, "") else datetime.fromtimestamp(float(value), UTC)
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class StepInfo:
    """One step (or sleep, wait, parallel, or item of a parallel) of a run."""

    name: str
    kind: str
    state: str
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str = ""
    #: A sleep's wake time, a wait's deadline or a step's next run, if any.
    next_at: datetime | None = None
    #: The signals a first_of waits for (kind "first"), else ().
    signals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run(Generic[O]):
    """A flow call as get_run and list_runs report it (Flow.get_run: its output typed)."""

    call_id: str
    flow: str
    status: str
    input: dict[str, Any]
    metadata: dict[str, Any]
    output: O | None = None
    error: str = ""
    created_at: datetime | None = None
    finished_at: datetime | None = None
    steps: list[StepInfo] = field(default_factory=list)
    #: The version of the flow's code the run was started under (Flow.version).
    version: int = 1
    #: The call id of the run that started this one with ctx.start_child, or "".
    parent: str = ""
    #: The call ids of the runs this one started with ctx.start_child, sorted.
    children: list[str] = field(default_factory=list)

    def step(self, name: str) -> StepInfo | None:
        """The step (or sleep, wait, parallel) of that name, if the run has reached it."""
        return next((s for s in self.steps if s.name == name), None)


def _run(state: CallState) -> Run:
    m = state.meta
    steps = []
    for key, raw in state.status.items():
        kind, _, name = key.partition(":")
        if kind == "version":
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        steps.append(
            StepInfo(
                name=name, kind=kind, state=str(rec.get("state", "")),
                attempts=int(rec.get("attempts", 0)), started_at=_at(rec.get("started_at")),
                finished_at=_at(rec.get("finished_at")), error=str(rec.get("error", "")),
                next_at=_at(rec.get("next_at") or rec.get("wake_at") or rec.get("deadline")),
                signals=tuple(str(x) for x in rec.get("signals") or ()) if kind == "first" else (),
            )
        )  # fmt: skip
    steps.sort(key=lambda s: (s.started_at or datetime.max.replace(tzinfo=UTC), s.name))
    metadata = json.loads(m.get("metadata") or "{}")
    parent = metadata.get(PARENT_KEY) if isinstance(metadata, dict) else None
    return Run(
        call_id=state.call_id,
        flow=m.get("flow", ""),
        status=m.get("status", ""),
        input=json.loads(m.get("input") or "{}"),
        metadata=metadata,
        output=json.loads(m["output"]) if "output" in m else None,
        error=m.get("error", ""),
        created_at=_at(m.get("created_at")),
        finished_at=_at(m.get("finished_at")),
        steps=steps,
        version=int(m["version"]) if m.get("version", "").isdigit() else 1,
        parent=parent if isinstance(parent, str) else "",
        children=_children(state.status),
    )


@overload
def get_run(call_id: str) -> Run[Any] | None: ...


@overload
def get_run(call_id: str, flow: type[Flow[Any, T]]) -> Run[T] | None: ...


def get_run(call_id: str, flow: type[Flow[Any, Any]] | None = None) -> Run[Any] | None:
    """The run of a call, or None if there is none (never started, or past its retention).
    With its flow class, as `flow.get_run(call_id)`: the output typed, None for another
    flow's call."""
    if flow is not None:
        return flow.get_run(call_id)
    (state,) = store().read([call_id])
    return None if state is None else _run(state)


@dataclass(frozen=True)
class RunPage:
    """One page of list_runs, newest first."""

    runs: list[Run]
    page: int
    per_page: int
    has_next: bool

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


def list_runs(
    flow: str | type | None = None,
    status: str | None = None,
    *,
    page: int = 1,
    per_page: int = 50,
) -> RunPage:
    """A page of runs, newest first: of one flow (its name or class) and/or one status.

    Without a status, a page is one range of the index; with one, the index is read in chunks
    until the page is full (runs past their retention are dropped from the index as met).
    """
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if page < 1 or per_page < 1:
        raise ValueError("page and per_page must be 1 or more")
    name = flow if isinstance(flow, str) or flow is None else getattr(flow, "name", "")
    s = store()
    skip, want, offset = (page - 1) * per_page, per_page + 1, 0
    found: list[Run] = []
    chunk = max(per_page * 2, 100) if status else per_page + 1
    if not status:
        offset = skip
    while len(found) < want:
        _, ids = s.call_ids(name, offset, offset + chunk - 1)
        if not ids:
            break
        offset += len(ids)
        states = s.read(ids)
        s.forget(name or "", [i for i, st in zip(ids, states, strict=True) if st is None])
        for st in states:
            if st is None or (status and st.meta.get("status") != status):
                continue
            if status and skip:
                skip -= 1
                continue
            found.append(_run(st))
    return RunPage(found[:per_page], page, per_page, len(found) > per_page)
