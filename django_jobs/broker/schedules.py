"""What the worker's scheduler and the inspector need of Redis for schedules.

Per schedule, `<ns>:schedule:<name>` (a hash: the last fire time handled, the last enqueue and
its task, the paused flag) and `<ns>:schedule:<name>:fires` (its last fires, bounded); the set
`<ns>:schedules` names those Redis holds, so a worker can delete the state of a schedule no
longer configured. A fire is three round trips, each on one Redis Cluster slot: a read of the
schedule's hash (its last fire and paused flag), the enqueue of its task under the fire time's
idempotency key (so however many workers fire one fire time, one task is enqueued), then the
record, `fire` (the last fire time only moves forward), and the history entry. A pause that
comes between the read and the enqueue lets that one fire through.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django_jobs.broker.info import Fire, ScheduleState
from django_jobs.broker.inspect import InspectCalls
from django_jobs.broker.protocol import Accepted, EnqueueRequest
from django_jobs.keys import logical_queue, schedule, schedule_fires, schedules, tagged_queue

#: What became of a fire whose record failed (the enqueue went in).
RECORD_LOST = "its task was enqueued, but the fire was not recorded (the next tick finds its key)"
#: The fields of a schedule's hash, in the order schedule_states reads them.
FIELDS = ("last_fire", "last_fired_at", "last_task_id", "last_task_queue", "paused")


def _float(value: bytes | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None  # written by hand: read as absent


def _glob(text: str) -> str:
    """text as a literal in a SCAN MATCH pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


def _at(value: object) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(value), UTC)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


class ScheduleCalls(InspectCalls):
    """Schedules' state and fires on one Redis broker."""

    def _enqueue_call(self, request: EnqueueRequest) -> tuple[list[str], list[Any]]:
        """The enqueue script's keys and arguments for one task (RedisBroker's)."""
        raise NotImplementedError

    def enqueue(self, requests: Sequence[EnqueueRequest]) -> list[Accepted]:
        """Enqueue tasks (RedisBroker's)."""
        raise NotImplementedError

    def time(self) -> float:
        """Redis' clock, in epoch seconds."""
        with self.unavailable(writes=False):
            seconds, micros = self.client.time()
        return seconds + micros / 1_000_000

    def fire(
        self, name: str, request: EnqueueRequest, fire_time: float | None, history: int
    ) -> Accepted | None:
        """Enqueue a schedule's task, then record the fire; see the Protocol (and the module
        for its round trips)."""
        key = request.idempotency_key
        assert key is not None, "a fire always has its idempotency key"
        ns = self.settings.namespace
        if fire_time is not None:
            (state,) = self._read([("HMGET", schedule(ns, name), "last_fire", "paused")])
            if isinstance(state, list):  # else not a hash: the record below names the key
                last = _float(state[0])
                if (last is not None and last >= fire_time) or state[1] == b"1":
                    return None  # fired or skipped by another worker, or paused
        (accepted,) = self.enqueue([request])
        task_id = request.id if accepted.duplicate_of is None else ""
        prefix = key[: key.rfind(f":schedule:{name}:") + len(f":schedule:{name}:")]
        fire = "" if fire_time is None else repr(fire_time)
        args = [fire, task_id, request.queue, prefix]
        fired_at = self._run("fire", [schedule(ns, name)], args, RECORD_LOST)
        if task_id:
            entry = {"fired_at": float(fired_at), "fire_time": fire, "task_id": task_id,
                     "queue": request.queue}  # fmt: skip
            with self.unavailable(outcome=RECORD_LOST):
                pipe = self.client.pipeline(transaction=False)
                pipe.lpush(schedule_fires(ns, name), json.dumps(entry))
                pipe.ltrim(schedule_fires(ns, name), 0, history - 1)
                pipe.execute()
        return accepted

    def skip_fire(self, name: str, fire_time: float) -> bool:
        """Make fire_time the schedule's last fire without a task; see the Protocol."""
        keys = [schedule(self.settings.namespace, name)]
        return bool(self._run("skip_fire", keys, [repr(fire_time)]))

    def schedule_states(self, names: Sequence[str]) -> dict[str, ScheduleState]:
        """Each schedule's state, one round trip; a hash of another type reads as empty."""
        ns = self.settings.namespace
        replies = self._read([("HMGET", schedule(ns, name), *FIELDS) for name in names])
        states = {}
        for name, reply in zip(names, replies, strict=True):
            values: list[Any] = reply if isinstance(reply, list) else [None] * len(FIELDS)
            last_fire, fired_at, task_id, queue, paused = values
            states[name] = ScheduleState(
                last_fire=_float(last_fire),
                last_fired_at=_float(fired_at),
                last_task_id=_text(task_id),
                last_task_queue=_text(queue),
                paused=paused == b"1",
            )
        return states

    def fire_history(self, name: str, limit: int) -> list[Fire]:
        """The schedule's last fires, newest first; an entry that is not ours is left out."""
        key = schedule_fires(self.settings.namespace, name)
        (reply,) = self._read([("LRANGE", key, 0, limit - 1)])
        fires = []
        for raw in reply if isinstance(reply, list) else []:
            try:
                entry = json.loads(raw)
                fired_at = _at(entry["fired_at"])
                assert fired_at is not None
                fires.append(
                    Fire(
                        fired_at=fired_at,
                        fire_time=_at(entry["fire_time"]) if entry["fire_time"] != "" else None,
                        task_id=str(entry["task_id"]),
                        queue=str(entry["queue"]),
                    )
                )
            except (ValueError, TypeError, KeyError, AssertionError):
                continue
        return fires

    def pause_schedule(self, name: str) -> None:
        """Stop the schedule firing (its fire times pass without a task) until resumed."""
        with self.unavailable():
            self.client.hset(schedule(self.settings.namespace, name), "paused", "1")

    def resume_schedule(self, name: str) -> None:
        """Let a paused schedule fire again from its next fire time."""
        with self.unavailable():
            self.client.hdel(schedule(self.settings.namespace, name), "paused")

    def _fire_keys(self, prefix: str) -> list[str]:
        """SCAN patterns of a schedule's fire keys, from the prefix its last fire recorded:
        on every shard of its queue (each fire's key is on the shard it hashes to)."""
        tag = tagged_queue(prefix)
        head, tail = prefix.split(f"{{{tag}}}", 1)
        shards = dict.fromkeys([tag, *self.shards.of(logical_queue(tag))])
        return [_glob(f"{head}{{{shard}}}{tail}") + "*" for shard in shards]

    def forget_schedules(self, keep: Sequence[str]) -> list[str]:
        """Delete the state of the schedules Redis holds that are not in keep (their hash,
        history and fire times' idempotency keys, found by a SCAN of every shard of their
        queue, only when there are such schedules); register keep."""
        ns = self.settings.namespace
        with self.unavailable():
            known = {str(m) for m in self.client.smembers(schedules(ns))}
            gone = sorted(known - set(keep))
            pipe = self.client.pipeline(transaction=False)  # one slot a command (a Cluster)
            for name in gone:
                prefix = self.client.hget(schedule(ns, name), "fire_keys")
                if isinstance(prefix, str) and prefix:
                    for match in self._fire_keys(prefix):
                        for key in self.client.scan_iter(match=match, count=1000):
                            pipe.delete(key)
                pipe.delete(schedule(ns, name))
                pipe.delete(schedule_fires(ns, name))
                pipe.srem(schedules(ns), name)
            if keep:
                pipe.sadd(schedules(ns), *keep)
            pipe.execute()
        return gone
