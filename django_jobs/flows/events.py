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
web request keeps JOBS["OUTBOX"]: under the outbox (`outbox_applies`) the start or the signal
itself travels in its event's row (`FlowEventPayload.begin`, `.signal`), so that a rollback
drops both and Redis down at the call writes the row: the worker that takes the event runs
flow_start (when it finds no run) or flow_signal, then replays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from django_jobs.broker.factory import get_broker
from django_jobs.broker.flows import FlowStore, dumps
from django_jobs.client import Options, enqueue, outbox_wanted
from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerUnavailable
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
    #: A start that travels in the outbox: input, metadata, idempotency_key, version (the
    #: worker records the call when it finds none), or None.
    begin: dict[str, Any] | None = None
    #: A signal that travels in the outbox: name and value (JSON), delivered by the worker.
    signal: dict[str, Any] | None = None


def store() -> FlowStore:
    return FlowStore(get_broker())


def outbox_applies() -> bool:
    """Whether a start or a signal sent now goes through the outbox (never in a replay)."""
    return not _replaying.get() and outbox_wanted(None, get_settings())


def publish(
    call_id: str,
    flow: str,
    *,
    delay: float = 0.0,
    start: bool = False,
    unknown_since: float = 0.0,
    crashes: int = 0,
    begin: dict[str, Any] | None = None,
    signal: dict[str, Any] | None = None,
) -> None:
    """Publish an event for a call: on the critical queue unless it is the start."""
    critical, starts = get_settings().flow_queues
    payload = FlowEventPayload(call_id, flow, unknown_since, crashes, begin, signal)
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
    call id (the original one for a duplicate idempotency key).

    Under the outbox inside atomic(): publish the start event carrying the call (its row in
    the outbox: a rollback drops it, Redis down keeps it) and record the call right after the
    commit (or the worker does, from the event); return call_id: a duplicate idempotency key is
    then found, and logged, late. Outside atomic() the call is recorded now, as without the
    outbox (there is nothing to roll back), and only with Redis down does it travel in the row.
    """
    begin = begin_of(data, metadata, key, version)
    if outbox_applies():
        if transaction.get_connection().in_atomic_block:
            publish(call_id, flow, start=True, begin=begin)
            transaction.on_commit(lambda: _record_after_commit(flow, call_id, begin))
            return call_id
        try:
            status, value = record_start(store(), flow, call_id, begin)
        except BrokerUnavailable:
            publish(call_id, flow, start=True, begin=begin)
            return call_id
    else:
        status, value = record_start(store(), flow, call_id, begin)
    if status == "duplicate":
        return value
    if status == "exists" and value != "running":
        return call_id  # a call id started before, and it has moved on
    # New, or recorded but maybe never published (a start that failed half-way and was
    # retried): an extra event only replays a call that has nothing to do.
    publish(call_id, flow, start=True)
    return call_id


def _record_after_commit(flow: str, call_id: str, begin: dict[str, Any]) -> None:
    """Record a call started under the outbox once its transaction committed, so that a signal,
    cancel() or get_run() right after finds it; failing that, its event's worker records it."""
    try:
        record_start(store(), flow, call_id, begin)
    except BrokerUnavailable:
        pass  # Redis down: the start travels in its event's outbox row


def begin_of(
    data: dict[str, Any], metadata: dict[str, Any], key: str | None, version: int
) -> dict[str, Any]:
    """A start as its event carries it (FlowEventPayload.begin)."""
    return {"input": data, "metadata": metadata, "idempotency_key": key, "version": version}


def record_start(s: FlowStore, flow: str, call_id: str, begin: dict[str, Any]) -> tuple[str, str]:
    """flow_start for a start (`FlowEventPayload.begin`); for a duplicate idempotency key, log
    it and publish the original's first event again if it was never replayed."""
    key = begin.get("idempotency_key")
    status, value = s.start(call_id, flow, dumps(begin["input"]), dumps(begin["metadata"]),
                            key, int(begin.get("version") or 1))  # fmt: skip
    if status == "duplicate":
        logger.info("flow %s: idempotency key %r holds call %s: not started", flow, key, value)
        (original,) = s.read([value])
        if original is not None and original.meta.get("epoch") == "0":
            # Never replayed: its first start may have failed before its event was sent.
            publish(value, flow, start=True)
    return status, value
