"""A flow's events: tasks of one internal job, `FlowEvent` (engine.py), on the flows' queue pair.

An event names a call and its flow; the worker that takes it replays the call (engine.py).
Starts go on `<FLOWS_NAMESPACE>`, every later event (a step's backoff, a sleep's or a wait's
timer, a signal's wake-up, a bounce) on `<FLOWS_NAMESPACE>_critical`, which workers drain first
(see `JobsSettings.served_queues`). Events are published with the client's `enqueue`, so they
take the same paths as any job's (on commit, the outbox, delays in the scheduled set), and they
are delivered at least once: a replay of a duplicate finds every recorded step done.

Events published by a replay, inside the worker (`replaying()`: its timers, wake-ups, bounces,
the children it starts and the signals it sends its parent) skip the outbox: the replay needs
Redis anyway, and a database commit per event would only slow it. A start or a signal from a
web request keeps JOBS["OUTBOX"].
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django_jobs.broker.factory import get_broker
from django_jobs.broker.flows import FlowStore, dumps
from django_jobs.client import Options, enqueue
from django_jobs.conf import get_settings
from django_jobs.jobs import registry as jobs

logger = logging.getLogger("django_jobs.flows")

#: The registered name of the events' job (engine.FlowEvent).
FLOW_EVENT = "django_jobs.FlowEvent"

#: Whether this context runs a replay (engine.replay): its events skip the outbox.
_replaying: ContextVar[bool] = ContextVar("django_jobs_flow_replaying", default=False)


@contextmanager
def replaying() -> Iterator[None]:
    """Mark the code inside as a replay in the worker (see the module's docstring)."""
    token = _replaying.set(True)
    try:
        yield
    finally:
        _replaying.reset(token)


@dataclass
class FlowEventPayload:
    """Which call to replay, of which flow."""

    call_id: str
    flow: str
    #: When a worker first found the flow unknown (epoch seconds), or 0.
    unknown_since: float = 0.0
    #: Workers that died under this event's predecessors (see engine.CRASH_LOOP).
    crashes: int = 0


def store() -> FlowStore:
    return FlowStore(get_broker())


def publish(
    call_id: str,
    flow: str,
    *,
    delay: float = 0.0,
    start: bool = False,
    unknown_since: float = 0.0,
    crashes: int = 0,
) -> None:
    """Publish an event for a call: on the critical queue unless it is the start."""
    critical, starts = get_settings().flow_queues
    payload = FlowEventPayload(call_id, flow, unknown_since, crashes)
    options = Options(queue=starts if start else critical, delay=max(0.0, delay) or None)
    outbox = False if _replaying.get() else None
    enqueue(jobs.get(FLOW_EVENT), [(payload, None)], options, on_commit=False, outbox=outbox)


def start_call(
    flow: str,
    call_id: str,
    data: dict[str, Any],
    metadata: dict[str, Any],
    key: str | None,
    version: int = 1,
) -> str:
    """Record a call (under its flow's code version) and publish its first event; return its
    call id (the original one for a duplicate idempotency key)."""
    s = store()
    status, value = s.start(call_id, flow, dumps(data), dumps(metadata), key, version)
    if status == "duplicate":
        logger.info("flow %s: idempotency key %r holds call %s: not started", flow, key, value)
        (original,) = s.read([value])
        if original is not None and original.meta.get("epoch") == "0":
            # Never replayed: its first start may have failed before its event was sent.
            publish(value, flow, start=True)
        return value
    if status == "exists" and value != "running":
        return call_id  # a call id started before, and it has moved on
    # New, or recorded but maybe never published (a start that failed half-way and was
    # retried): an extra event only replays a call that has nothing to do.
    publish(call_id, flow, start=True)
    return call_id
