"""`ctx.start_child(Flow, input, name=..., wait=True)`: a run started by a run.

The parent records `child:<name>` (the child's call id, "<parent>.<name>") before it starts
the child, so that a cancel() of the parent always finds it. The start is once per parent:
the child's call id makes a second start (a replay after a crash) a no-op. The child's
metadata names its parent (`parent_call_id`; Run.parent) and, when awaited, the step that
waits for it (`parent_step`).

Awaited: the parent waits for the signal `child:<name>`, which the child's end sends it (its
status, output or error: the engine's finish, or cancel() of a child that slept), and returns
the child's output, or raises StepFailed when the child failed or was canceled.

Cancel policy: canceling a parent cancels every child it started, awaited or not, and theirs
(runs.cancel, and the parent's replay when it ends as canceled). A parent that ends otherwise
leaves its unawaited children running. A child canceled on its own fails the parent's awaiting
start_child with StepFailed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import TYPE_CHECKING, Any

from django_jobs.flows.base import CALL_ID_RE
from django_jobs.flows.errors import StepFailed
from django_jobs.flows.events import start_call
from django_jobs.flows.runs import PARENT_KEY, PARENT_STEP_KEY
from django_jobs.message import payload_from_json, payload_to_json

if TYPE_CHECKING:
    from django_jobs.flows.base import Flow
    from django_jobs.flows.context import Context


def child_call_id(parent: str, name: str) -> str:
    """ "<parent>.<name>", or, when that is not a valid call id, the parent's first 40
    characters and a digest of the whole "<parent>.<name>" (two long parents never share one)."""
    call_id = f"{parent}.{name}"
    if CALL_ID_RE.match(call_id):
        return call_id
    return f"{parent[:40]}.{hashlib.sha256(call_id.encode()).hexdigest()[:48]}"


def start_child(ctx: Context, flow: type[Flow[Any, Any]], input: Any, name: str, wait: bool) -> Any:
    field = f"child:{name}"
    rec = ctx._record(field)
    if not rec:
        rec = {"state": "starting", "call_id": child_call_id(ctx.call_id, name),
               "flow": flow.name, "wait": wait, "started_at": time.time()}  # fmt: skip
        ctx.write(status={field: rec})
    child = str(rec["call_id"])
    if rec.get("state") == "starting":
        metadata: dict[str, Any] = {PARENT_KEY: ctx.call_id}
        if wait:
            metadata[PARENT_STEP_KEY] = name
        data = payload_to_json(input, flow.input_type)
        start_call(flow.name, child, data, metadata, None, flow.version)
        rec["state"] = "started"
        ctx.write(status={field: rec})
    if not wait:
        return child
    result, _ = ctx._wait(f"child:{name}", None)
    if isinstance(result, dict) and rec.get("state") != result.get("status"):
        rec.update(state=str(result.get("status")), finished_at=time.time())
        ctx._derived[field] = rec  # derived again the same by any later replay
    if not isinstance(result, dict) or result.get("status") != "succeeded":
        status = result.get("status") if isinstance(result, dict) else result
        error = result.get("error", "") if isinstance(result, dict) else ""
        raise StepFailed(name, f"child {child} {status}: {error}".rstrip(": "))
    output = result.get("output")
    out_type = flow.output_type
    if output is not None and isinstance(out_type, type) and dataclasses.is_dataclass(out_type):
        return payload_from_json(output, out_type)
    return output
