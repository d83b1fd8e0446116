"""The replay: what a worker does with one flow event.

1. Find the flow class. Unknown here (a rolling deploy): publish the event again after
   JOBS["FLOW_UNKNOWN_DELAY"], and after JOBS["FLOW_UNKNOWN_GRACE"] let it go dead with
   "unknown flow X: is this worker's code up to date?". So too for a run started by a newer
   version of the flow (Flow.version) than this worker's, once its lease is taken (step 3).
2. An event whose worker died under it is published afresh (the per-step crash count bounds a
   step that kills its worker; the event's own would strand the call after MAX_CRASHES), up
   to CRASH_LOOP times MAX_CRASHES in a row.
3. Take the call's replay lease under a new epoch and read its state: one round trip. Busy
   (another replay holds it): publish the event again shortly, so that what it brings (a
   signal) is seen. Finished or gone: nothing to do.
4. Run the flow from the top. Steps done return their memoised values; the first one not done
   runs. A sleep, a wait or a backoff records itself, releases the lease and publishes its timer
   (a delayed event in the scheduled set); the end records the output or the error, releases
   the lease and starts the retention clock; then the hooks run.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from typing import Any

from django_jobs.broker.flows import dumps
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable, JobTimeout, LeaseLost
from django_jobs.flows.base import Flow, registry
from django_jobs.flows.context import Context
from django_jobs.flows.errors import Canceled, ReplayLost, StepFailed, Suspend, UnknownFlow
from django_jobs.flows.events import (
    FLOW_EVENT,
    FlowEventPayload,
    publish,
    record_start,
    replaying,
    store,
)
from django_jobs.flows.runs import (
    PARENT_KEY,
    PARENT_STEP_KEY,
    cancel_children,
    deliver,
    notify_parent,
)
from django_jobs.jobs import Fail, Job
from django_jobs.message import JobContext, payload_from_json

logger = logging.getLogger("django_jobs.flows")

#: A chain of events each of whose worker died (each published afresh by the next delivery,
#: so that the event's own crash budget does not strand the call) ends after this many times
#: MAX_CRASHES: the steps' own crash counts bound a step that kills its worker, this bounds
#: flow code that does so outside any step.
CRASH_LOOP = 10
#: Bounds of the delay before a busy call's event is offered again, in seconds.
BUSY_DELAY = (0.05, 1.0)


class FlowEvent(Job[FlowEventPayload]):
    """Replay one flow call (the engine's job: see django_jobs.flows)."""

    name = FLOW_EVENT
    queue = ""  # every event names its queue: one of the flows' pair (events.publish)
    retention = 0  # an event is done once replayed: keep nothing
    # Steps count their own attempts; an event raises only when the engine could not write
    # (Redis unreachable meanwhile): its retries ride out an outage.
    max_attempts = 10

    def run(self, payload: FlowEventPayload) -> None:
        with replaying():
            replay(payload, self.context)


def replay(payload: FlowEventPayload, event: JobContext | None) -> None:
    """Replay one call for one event (the FlowEvent job's run)."""
    s = store()
    if payload.signal is not None:  # a signal sent under the outbox: deliver it here
        name = str(payload.signal.get("name"))
        answer = deliver(payload.call_id, name, dumps(payload.signal.get("value")))
        if answer == "gone":  # its call's start may still be on its way (the outbox, a queue)
            _bounce(payload, f"signal {name!r} for call {payload.call_id}: no such run yet")
            return
        logger.info("flow call %s: outboxed signal %r: %s", payload.call_id, name, answer)
        return
    try:
        flow_cls = registry.get(payload.flow)
    except UnknownFlow as exc:
        _bounce(payload, str(exc))
        return
    crash_loop = ""
    if event is not None and event.crashes:
        crashes = payload.crashes + event.crashes
        if crashes < CRASH_LOOP * s.settings.max_crashes:
            publish(payload.call_id, payload.flow, crashes=crashes, begin=payload.begin)
            return
        crash_loop = (
            f"its replays crashed their worker {crashes} times in a row (its code outside "
            f"steps, or a step that kills its worker before it is recorded running?)"
        )
    acquired = s.acquire(payload.call_id)
    if acquired.kind == "gone" and payload.begin is not None:  # a start sent under the outbox
        status, _ = record_start(s, payload.flow, payload.call_id, payload.begin)
        if status == "duplicate":
            return
        acquired = s.acquire(payload.call_id)
    if acquired.kind == "busy":
        delay = min(max(acquired.pttl / 1000, BUSY_DELAY[0]), BUSY_DELAY[1])
        publish(payload.call_id, payload.flow, delay=delay)
        return
    if acquired.kind == "finished":
        # A duplicate or late event. The finish of a child whose worker died before it told
        # its parent comes back here (the event is delivered again): tell it now (a signal
        # sent twice is a duplicate, and still wakes a parent that waits).
        (state,) = s.read([payload.call_id])
        if state is not None and f'"{PARENT_STEP_KEY}"' in state.meta.get("metadata", ""):
            notify_parent(state)
        return
    if acquired.kind != "ok":
        return  # gone (past its retention)
    ctx = Context(s, payload.call_id, flow_cls.name, acquired.epoch, acquired.meta,
                  acquired.status, event)  # fmt: skip
    if crash_loop:
        if _finish(ctx, "failed", error=crash_loop):
            _hook(flow_cls().on_failure, ctx, StepFailed("(replay)", crash_loop))
        return
    if ctx.run_version > flow_cls.version:  # a newer worker started it: a rolling deploy
        try:
            ctx.write("release", meta={"status": "running"})
        except Canceled:
            _finish(ctx, "canceled")
            return
        except ReplayLost:
            return
        _bounce(payload, (
            f"call {ctx.call_id} was started by version {ctx.run_version} of flow "
            f"{flow_cls.name}, this worker has version {flow_cls.version}: is its code up to date?"
        ))  # fmt: skip
        return
    run(flow_cls, ctx)


def _bounce(payload: FlowEventPayload, why: str) -> None:
    """Publish the event again after FLOW_UNKNOWN_DELAY, for a worker whose code is up to date
    (a rolling deploy); after FLOW_UNKNOWN_GRACE, let it go dead saying why."""
    settings = store().settings
    since = payload.unknown_since or time.time()
    grace = settings.flow_unknown_grace
    if time.time() - since >= grace:
        raise Fail(f"{why} (bounced for {grace:g}s)") from None
    logger.warning("flow event for call %s put back: %s", payload.call_id, why)
    publish(payload.call_id, payload.flow, delay=settings.flow_unknown_delay,
            unknown_since=since, begin=payload.begin, signal=payload.signal)  # fmt: skip


def run(flow_cls: type[Flow[Any, Any]], ctx: Context) -> None:
    """Run the flow's code under ctx's lease, and record how this replay ended."""
    flow = flow_cls()
    try:
        data = json.loads(ctx._meta["input"])
        output = flow.run(ctx, payload_from_json(data, flow_cls.input_type))
        if ctx.history.violation is not None:
            raise ctx.history.violation  # caught by the flow's code: the run fails anyway
        problem = _output_problem(output)
        if problem:
            raise StepFailed("(output)", f"the flow's output {problem}")
    except Suspend as suspended:
        if suspended.wake_at is not None:
            publish(ctx.call_id, ctx.flow, delay=suspended.wake_at - time.time())
        return
    except ReplayLost:
        taken = _interrupted(ctx) == "taken"
        logger.warning(
            "flow %s %s: replay lease lost (%s); this replay stops, writing nothing",
            ctx.flow, ctx.call_id,
            "another replay took the call" if taken else "it expired: an event goes on",
        )  # fmt: skip
        if not taken:  # nobody holds the call: without a new event it would wait for ever
            publish(ctx.call_id, ctx.flow)
        return
    except (Canceled, LeaseLost) as stopped:
        why = _interrupted(ctx) if isinstance(stopped, LeaseLost) else "canceled"
        if why == "taken":
            return  # another replay holds the call now: this event has nothing left to do
        if why == "lost":
            raise  # the event's own lease is lost: nothing is written, the task is another's
        _finish(ctx, "canceled")
        return
    except (BrokerUnavailable, BrokerRefused, JobTimeout):
        # An engine write that did not go through, or the event's own timeout outside any
        # step: the event is retried (the steps recorded stay recorded), the run goes on.
        raise
    except Exception as exc:
        error = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
        if _finish(ctx, "failed", error=error[:2000]):
            _hook(flow.on_failure, ctx, exc)
        return
    if _finish(ctx, "succeeded", output=_dump(output)):
        _hook(flow.on_success, ctx, output)


def _dump(output: Any) -> str:
    import dataclasses

    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        output = dataclasses.asdict(output)
    return dumps(output)


def _output_problem(output: Any) -> str:
    import dataclasses

    from django_jobs.flows.steps import refuse_non_json

    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        output = dataclasses.asdict(output)
    return refuse_non_json(output)


def _interrupted(ctx: Context) -> str:
    """Why the supervisor interrupted this replay (LeaseLost): "canceled" (cancel() was asked),
    "taken" (its replay lease is another replay's now) or "lost" (the event's task lease)."""
    (state,) = ctx.store.read([ctx.call_id])
    if state is None or state.meta.get("epoch") != ctx.epoch:
        return "taken"
    return "canceled" if "cancel" in state.meta else "lost"


def _finish(ctx: Context, status: str, *, output: str = "", error: str = "") -> bool:
    """Record the end of the run; False when this replay may no longer write."""
    meta = {"status": status}
    if status == "succeeded":
        meta["output"] = output
    else:
        meta["error"] = error
    if status == "canceled":
        (state,) = ctx.store.read([ctx.call_id])
        meta["error"] = f"canceled: {state.meta.get('cancel', '') if state else ''}"
    try:
        ctx.write("finish", meta=meta)
    except (ReplayLost, Canceled):
        return False
    if status == "canceled":
        cancel_children(ctx.call_id, meta["error"])
    if PARENT_KEY in ctx.metadata:
        (state,) = ctx.store.read([ctx.call_id])
        if state is not None:
            notify_parent(state)
    logger.info("flow %s %s %s%s", ctx.flow, ctx.call_id, status, f": {error}" if error else "")
    return True


def _hook(hook: Any, ctx: Context, value: Any) -> None:
    """Call on_success(ctx, output) / on_failure(ctx, error); a hook written with the value
    alone, as on_success(self, output), is called so."""
    try:
        try:
            parameters = inspect.signature(hook).parameters.values()
            positional = [
                p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
        except (TypeError, ValueError):
            positional, varargs = [], True
        if len(positional) == 1 and not varargs:
            hook(value)
        else:
            hook(ctx, value)
    except Exception:
        logger.exception("flow %s %s: %s raised", ctx.flow, ctx.call_id, hook.__name__)
