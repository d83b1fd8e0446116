"""What the flow engine (django_jobs.flows) and the worker's heartbeat need of Redis for flows.

Per call, three keys hash-tagged by the call id, so that a call lives on one Redis Cluster slot
and every write of a replay is one script on that slot (see docs/flows.rst):

- `<ns>:<fns>:{<call>}_meta`, a hash: the flow's name, input and metadata, the run's status,
  output or error, the replay epoch, the memoised step values (`v:<step>`) and the delivered
  signals (`sig:<name>`);
- `<ns>:<fns>:{<call>}_status`, a hash: one field per step (its state, attempts, timings and
  errors, as JSON);
- `<ns>:<fns>:{<call>}_lease`, a string: the epoch of the replay that holds the call (30 s,
  renewed every 10 s by the supervisor of the worker that replays it).

Every write of a replay is `flow_write`, a compare-and-set on that epoch: a replay whose lease
expired (its worker froze or died) and was taken over by a newer epoch writes nothing. The
indexes `<ns>:<fns>:runs` and `<ns>:<fns>:runs:<flow>` (sorted sets of call ids by start) are
written by `flow_start` only; a finished call's keys expire after JOBS["FLOW_RETENTION"], and
the listing drops index entries whose call is gone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from redis.exceptions import NoScriptError

from django_jobs.broker.connection import NOTHING_CHANGED, decoded
from django_jobs.broker.protocol import Delivery
from django_jobs.broker.redis import RedisBroker

#: The field of a flow event's task record naming the replay its child runs ("<call> <epoch>"),
#: so that the supervisor's heartbeat can renew that replay's lease.
REPLAY_FIELD = "flow_replay"


@dataclass(frozen=True)
class FlowKeys:
    """The keys of one flows namespace (`<ns>:<fns>`) and of its calls."""

    namespace: str
    flows_namespace: str

    @cached_property
    def prefix(self) -> str:
        return f"{self.namespace}:{self.flows_namespace}"

    def meta(self, call_id: str) -> str:
        return f"{self.prefix}:{{{call_id}}}_meta"

    def status(self, call_id: str) -> str:
        return f"{self.prefix}:{{{call_id}}}_status"

    def lease(self, call_id: str) -> str:
        return f"{self.prefix}:{{{call_id}}}_lease"

    def call(self, call_id: str) -> list[str]:
        """meta, status and lease: the KEYS of most flow scripts."""
        return [self.meta(call_id), self.status(call_id), self.lease(call_id)]

    def runs(self, flow: str | None = None) -> str:
        """Sorted set of call ids by start time: every flow's, or one flow's."""
        return f"{self.prefix}:runs" if flow is None else f"{self.prefix}:runs:{flow}"

    def idempotency(self, flow: str, key: str) -> str:
        return f"{self.prefix}:idem:{flow}:{key}"


@dataclass(frozen=True, slots=True)
class Acquired:
    """flow_acquire's answer: `kind` is "ok" (the replay holds the call under `epoch`),
    "gone", "finished" or "busy" (another replay holds it for `pttl` more milliseconds)."""

    kind: str
    epoch: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    pttl: int = 0
    finished: str = ""


@dataclass(frozen=True, slots=True)
class CallState:
    """A call's two hashes as read by get_run and list_runs."""

    call_id: str
    meta: dict[str, str]
    status: dict[str, str]


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}


class FlowStore:
    """The flow scripts of one broker, for one flows namespace."""

    def __init__(self, broker: RedisBroker) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.keys = FlowKeys(self.settings.namespace, self.settings.flows_namespace)
        self.lease_ms = max(1, round(self.settings.flow_replay_lease * 1000))

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self.broker._run(name, keys, args, NOTHING_CHANGED)

    # -- the engine ------------------------------------------------------------------------

    def start(
        self,
        call_id: str,
        flow: str,
        input_json: str,
        metadata_json: str,
        key: str | None,
        version: int = 1,
    ) -> tuple[str, str]:
        """Record a new call (under its flow's code version); ("ok", call), ("exists",
        status) or ("duplicate", call).

        Two round trips with an idempotency key, one without, each call on one Redis Cluster
        slot: the key is taken first (SET NX: it names its call as soon as it is taken, and a
        start retried with the same call id finds its own), then the call's hashes are written
        (flow_start) with its entries in the indexes (flow_index), in one round trip.
        """
        k = self.keys
        window = max(1, round(self.settings.idempotency_window * 1000))
        if key is not None:
            with self.broker.unavailable():
                holder = self.broker.client.set(
                    k.idempotency(flow, key), call_id, nx=True, px=window, get=True
                )
            if holder is not None and holder != call_id:
                return "duplicate", str(holder)
        args: list[Any] = [call_id, flow, input_json, metadata_json, window, version,
                           uuid.uuid4().hex]  # fmt: skip
        calls: list[tuple[str, list[str], list[Any]]] = [
            ("flow_start", [k.meta(call_id), k.status(call_id)], args),
            ("flow_index", [k.runs()], [call_id]),
            ("flow_index", [k.runs(flow)], [call_id]),
        ]
        with self.broker.unavailable():
            started, *_ = self.broker._pipeline(calls)
        status, value = (part.decode() for part in started)
        return status, value

    def acquire(self, call_id: str) -> Acquired:
        """Take the call's replay lease under a new epoch and read its state (one round trip)."""
        reply = self._run("flow_acquire", self.keys.call(call_id), [self.lease_ms])
        kind = str(reply[0])
        if kind == "ok":
            return Acquired(kind, str(reply[1]), _pairs(reply[2]), _pairs(reply[3]))
        if kind == "busy":
            return Acquired(kind, pttl=int(reply[1]))
        if kind == "finished":
            return Acquired(kind, finished=str(reply[1]))
        return Acquired(kind)

    def write(
        self,
        call_id: str,
        epoch: str,
        mode: str,
        *,
        status: dict[str, str] | None = None,
        meta: dict[str, str] | None = None,
        unless_signal: str = "",
        retention: float = 0.0,
        task: tuple[str, str] | None = None,
    ) -> str:
        """flow_write (see its file): "ok", "lost", "canceled" or "signaled".

        task: (queue, task id) of the flow event this replay runs: its record is told which
        replay it runs (REPLAY_FIELD), in the same round trip, for the heartbeat's renewals.
        """
        arg = self.lease_ms if mode == "keep" else max(1, round(retention))
        args: list[Any] = [epoch, mode, arg, unless_signal, len(status or {})]
        for pairs in (status or {}, meta or {}):
            for name, value in pairs.items():
                args += [name, value]
        if task is None:
            return str(self._run("flow_write", self.keys.call(call_id), args))
        queue, task_id = task
        record = self.broker.keys(queue).task(task_id)

        sha = self.broker.scripts["flow_write"].sha
        commands = [("HSET", record, REPLAY_FIELD, f"{call_id} {epoch}"),
                    ("EVALSHA", sha, 3, *self.keys.call(call_id), *args)]  # fmt: skip
        return str(self._with_scripts("flow_write", commands)[1])

    def _with_scripts(self, name: str, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send commands that call script `name` by SHA in one round trip (on a Redis Cluster,
        each to its slot's node), loading it first if Redis has forgotten it (a restart,
        SCRIPT FLUSH): writes that are safe twice. The replies as text; the first error raised."""
        with self.broker.unavailable():
            replies = self.broker._round_trip(commands, own=False)
            if any(isinstance(reply, NoScriptError) for reply in replies):
                self.broker.client.script_load(self.broker.scripts[name].script)
                replies = self.broker._round_trip(commands, own=False)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return [decoded(reply) for reply in replies]

    # -- outside a flow --------------------------------------------------------------------

    def signal(self, call_id: str, name: str, value_json: str) -> str:
        """flow_signal: "wake", "kept", "gone", "finished", "duplicate" or "late"."""
        keys = [self.keys.meta(call_id), self.keys.status(call_id)]
        return str(self._run("flow_signal", keys, [name, value_json]))

    def cancel(self, call_id: str, reason: str) -> str:
        """flow_cancel: "canceled", "requested", "finished" or "gone"."""
        args = [reason, max(1, round(self.settings.flow_retention))]
        return str(self._run("flow_cancel", self.keys.call(call_id), args))

    def read(self, call_ids: Sequence[str]) -> list[CallState | None]:
        """Each call's hashes (one round trip); None for a call that is gone."""
        if not call_ids:
            return []
        with self.broker.unavailable(writes=False):
            pipe = self.broker.client.pipeline(transaction=False)
            for call_id in call_ids:
                pipe.hgetall(self.keys.meta(call_id))
                pipe.hgetall(self.keys.status(call_id))
            replies = pipe.execute(raise_on_error=False)
        out: list[CallState | None] = []
        for i, call_id in enumerate(call_ids):
            meta, status = replies[2 * i], replies[2 * i + 1]
            if not isinstance(meta, dict) or "status" not in meta:
                out.append(None)
                continue
            out.append(CallState(call_id, meta, status if isinstance(status, dict) else {}))
        return out

    def call_ids(self, flow: str | None, start: int, stop: int) -> tuple[int, list[str]]:
        """The total and a page of call ids, newest first."""
        key = self.keys.runs(flow)
        with self.broker.unavailable(writes=False):
            pipe = self.broker.client.pipeline(transaction=False)
            pipe.zcard(key)
            pipe.zrevrange(key, start, stop)
            total, ids = pipe.execute()
        return int(total), [str(i) for i in ids]

    def forget(self, flow: str, call_ids: Sequence[str]) -> None:
        """Drop index entries of calls that are gone (removed after their retention)."""
        if not call_ids:
            return
        with self.broker.unavailable():
            pipe = self.broker.client.pipeline(transaction=False)
            pipe.zrem(self.keys.runs(), *call_ids)
            pipe.zrem(self.keys.runs(flow), *call_ids)
            pipe.execute()

    # -- the supervisor's heartbeat --------------------------------------------------------

    def renew(self, deliveries: Sequence[Delivery]) -> list[tuple[Delivery, str]]:
        """Renew the replay lease of each running flow event that runs a replay; return the
        events whose replay must be interrupted, with why: "lost" or "canceled".

        Two round trips: which replay each event runs (REPLAY_FIELD of its record), then one
        flow_renew per replay.
        """
        if not deliveries:
            return []
        with self.broker.unavailable():
            pipe = self.broker.client.pipeline(transaction=False)
            for d in deliveries:
                pipe.hget(self.broker.keys(d.queue).task(d.id), REPLAY_FIELD)
            replays = pipe.execute(raise_on_error=False)
            runs = [
                (d, str(r).split(" ", 1))
                for d, r in zip(deliveries, replays, strict=True)
                if isinstance(r, str) and " " in r
            ]
            if not runs:
                return []
        sha, k = self.broker.scripts["flow_renew"].sha, self.keys
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", sha, 2, k.meta(call_id), k.lease(call_id), epoch, self.lease_ms)
            for _, (call_id, epoch) in runs
        ]
        answers = self._with_scripts("flow_renew", commands)
        return [(d, str(a)) for (d, _), a in zip(runs, answers, strict=True) if a != "ok"]


def dumps(value: Any) -> str:
    """Compact JSON, as every flow value is stored."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
