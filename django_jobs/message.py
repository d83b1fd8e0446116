"""The task record: what enqueue writes and a worker reads, its JSON encoding, and what a run
of it knows about itself (`JobContext`).

The record is versioned (`v`), so a worker can refuse a record from a newer release with a clear
error instead of misreading it. Payloads are dataclasses whose fields hold JSON values; the check
that a payload survives a round trip runs at enqueue, never first in the worker.
"""

from __future__ import annotations

import dataclasses
import json
import json.encoder
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_jobs.exceptions import InvalidPayload, JobsError

#: The newest record version (`v` in the message) this release reads, and every version it
#: reads: records of earlier releases stay readable (tests/integration/test_upgrades.py reads
#: fixtures of versions 1 and 3). Version 2 added `trace` and `sensitive`. Version 3 leaves out
#: what the record's key says (the task id and the queue: `decode` is given them) and options at
#: their default (no `idempotency_key`, `trace` or `sensitive`): 81 bytes less a task.
NEWEST_READ = 3
READS = (1, 2, 3)
#: The record version this release writes: 2, as the releases before version 3 wrote it (a
#: message with neither a trace nor the sensitive flag is written as version 1: version 2's
#: keys without those two, which the releases before version 2 read too). The rollout rule: a
#: release writes only a version that the release before it reads, so that during a rolling
#: deploy old and new workers run each other's tasks; a new version is read by one release and
#: written by a later one. The release before this one reads 1 and 2
#: (tests/unit/test_message_format.py holds its decode, frozen); a later release may write 3
#: (`encode(..., version=3)`) once every worker runs one that reads 3.
WRITTEN_VERSION = 2


class DecodeError(JobsError, ValueError):
    """A task record in Redis cannot be read; the task goes dead with this error."""


@dataclass(frozen=True, slots=True)
class Message:
    """The immutable part of a task: who runs it, with what, under which limits."""

    id: str
    job: str
    queue: str
    payload: dict[str, Any]
    max_attempts: int
    timeout: float
    retention: float
    idempotency_key: str | None = None
    #: The enqueue's trace context (W3C traceparent/tracestate), when tracing is on.
    trace: dict[str, str] | None = None
    #: The job type's `Job.sensitive` at enqueue: readers (admin, API, CLI, logs) show its
    #: payload and idempotency key redacted, even when the job type is unknown to them.
    sensitive: bool = False


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a running job knows about itself (`self.context` inside `run`).

    Plain data, here below everything that runs a job (the worker, the inline backend, the test
    helpers); `django_jobs.JobContext` is this class.
    """

    job_id: str
    #: 1 for the first run, 2 for the first retry, ...
    attempt: int
    #: Times a worker died under this task before this run.
    crashes: int
    queue: str
    #: Epoch seconds after which the run is interrupted with JobTimeout.
    deadline: float
    idempotency_key: str | None = None
    #: The worker process running this attempt ("host:pid"); "" outside a worker.
    worker_id: str = ""


def encode(message: Message, version: int = WRITTEN_VERSION) -> str:
    """Encode a message as compact JSON, as record `version` 2 (1 without a trace or the flag:
    with the id, the queue and the idempotency key, null or not) or 3 (without what the
    record's key holds or options left at their default). "v" first, then the id in 1 and 2,
    then "job": dequeue.lua and read_fields.lua find the job name as the first `,"job":"`."""
    m = message
    if version == 3:
        body = {"v": 3, "job": m.job, "payload": m.payload, "max_attempts": m.max_attempts,
                "timeout": m.timeout, "retention": m.retention}  # fmt: skip
        if m.idempotency_key is not None:
            body["idempotency_key"] = m.idempotency_key
    elif version == 2:
        body = {"v": 2 if m.trace or m.sensitive else 1, "id": m.id, "job": m.job,
                "queue": m.queue, "payload": m.payload, "max_attempts": m.max_attempts,
                "timeout": m.timeout, "retention": m.retention,
                "idempotency_key": m.idempotency_key}  # fmt: skip
    else:
        raise ValueError(f"this release writes record versions 2 and 3, not {version!r}")
    if m.trace:
        body["trace"] = m.trace
    if m.sensitive:
        body["sensitive"] = True
    return _dumps(body)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _encoder_once() -> Callable[[Any, int], Any] | None:
    """_ENCODER's C encoder, built once: `JSONEncoder.encode` builds one on every call (0.8
    µs of a message's 2.4). Built without the circular-reference marks (a dict shared by
    threads, and left holding marks by an encode that raised), so a cycle ends in a
    RecursionError, which `_dumps` hands to `_ENCODER` for its own error. None where the C
    encoder is missing or does not give `_ENCODER`'s bytes (another Python's internals)."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    e = _ENCODER
    try:
        built: Callable[[Any, int], Any] = make(None, e.default, json.encoder.encode_basestring,
                                                None, e.key_separator, e.item_separator,
                                                e.sort_keys, e.skipkeys, e.allow_nan)  # fmt: skip
        probe = {"s": 'é"\n', "n": [1, -2.5, None, True], "d": {"k": 1e100}}
        return built if "".join(built(probe, 0)) == e.encode(probe) else None
    except Exception:  # no C encoder (None is not callable), or one that takes other arguments
        return None


_C_ENCODE = _encoder_once()


def _dumps(obj: dict[str, Any]) -> str:
    """`obj` as compact JSON, exactly as `_ENCODER.encode` writes it (and raising its errors)."""
    if _C_ENCODE is None:
        return _ENCODER.encode(obj)
    try:
        return "".join(_C_ENCODE(obj, 0))
    except RecursionError:  # a cycle, or a value nested too deep: the checking encoder says which
        return _ENCODER.encode(obj)


#: What marks a sensitive record in its encoded message, to see it without decoding (a record
#: that cannot be decoded, an outbox row).
SENSITIVE_MARK = '"sensitive":true'

#: Why a task whose id is listed but whose record is gone cannot run: what a Redis with an
#: eviction policy does under memory pressure (or a hand's DEL). The worker that meets such an
#: id files the task as dead with this error; the admin and the API list it with NO_RECORD.
RECORD_EVICTED = (
    "record evicted: only the task's id was left (Redis evicts records under a maxmemory-policy "
    "other than noeviction, or a hand deleted it). Set maxmemory-policy noeviction; enqueue the "
    "job again if it must run"
)
NO_RECORD = (
    "no record: only its id is left (evicted by Redis under a maxmemory-policy other than "
    "noeviction, or deleted by hand); a worker files it as dead when it meets it. Deleting it "
    "removes the id."
)


def decode(raw: str | bytes, task_id: str, queue: str) -> Message:
    """Decode the message of the record of task `task_id` in `queue` (what its key says),
    raising DecodeError with the reason if it is corrupt. A message of version 1 or 2 carries
    its own id and queue, which are kept."""
    if not raw:
        raise DecodeError("the task record is missing or has no message (written by hand?)")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"the task record is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise DecodeError(f"the task record is a JSON {type(body).__name__}, not an object")
    version = body.pop("v", None)
    if version not in READS:
        raise DecodeError(
            f"the task record has version {version!r}; this worker reads 1 to {NEWEST_READ}: "
            f"run the same django-jobs release on every worker"
        )
    if version == 3:
        body.setdefault("id", task_id)
        body.setdefault("queue", queue)
    try:
        message = Message(**body)
    except TypeError as exc:
        raise DecodeError(f"the task record does not have the expected fields: {exc}") from exc
    problems = [name for name, ok in _field_checks(message) if not ok]
    if problems:
        raise DecodeError(f"the task record has fields of the wrong type: {', '.join(problems)}")
    return message


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _field_checks(m: Message) -> list[tuple[str, bool]]:
    return [
        ("id", isinstance(m.id, str)),
        ("job", isinstance(m.job, str)),
        ("queue", isinstance(m.queue, str)),
        ("payload", isinstance(m.payload, dict)),
        ("max_attempts", isinstance(m.max_attempts, int) and not isinstance(m.max_attempts, bool)),
        ("timeout", _number(m.timeout) and m.timeout > 0),
        ("retention", _number(m.retention) and m.retention >= 0),
        ("idempotency_key", m.idempotency_key is None or isinstance(m.idempotency_key, str)),
        ("trace", m.trace is None or (isinstance(m.trace, dict)
                                      and all(isinstance(v, str) for v in m.trace.values()))),
        ("sensitive", isinstance(m.sensitive, bool)),
    ]  # fmt: skip


def payload_to_json(
    payload: object, payload_type: type[Any], sensitive: bool = False
) -> dict[str, Any]:
    """Return the payload's fields as JSON values, or raise InvalidPayload naming the field
    (and, unless `sensitive`, the values that do not survive)."""
    names = _field_names(payload_type)
    if type(payload) is not payload_type:
        raise InvalidPayload(
            f"expected a {payload_type.__qualname__} payload, got {type(payload).__qualname__}"
        )
    data = {name: getattr(payload, name) for name in names}
    tried = {name: value for name, value in data.items() if not _survives(value)}
    if not tried:  # the common case: every field a str, a number, a bool or None
        return data
    try:
        if json.loads(_dumps(tried)) == tried:  # one round trip for all the other fields
            return data
    except (TypeError, ValueError):
        pass
    for name, value in data.items():  # find the field to name in the error
        try:
            survived = json.loads(json.dumps(value))
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(
                f"{payload_type.__qualname__}.{name} holds a {type(value).__name__}, which "
                f"JSON cannot encode ({exc}); use str, int, float, bool, None, lists and dicts "
                f"with str keys, and pass references (ids) rather than objects"
            ) from None
        if survived != value and sensitive:
            raise InvalidPayload(
                f"{payload_type.__qualname__}.{name} does not survive a JSON round trip (its "
                f"value not shown: a sensitive job); use lists rather than tuples and str keys "
                f"in dicts"
            )
        if survived != value:
            raise InvalidPayload(
                f"{payload_type.__qualname__}.{name} does not survive a JSON round trip "
                f"({value!r} comes back as {survived!r}); use lists rather than tuples and "
                f"str keys in dicts"
            )
    raise AssertionError("unreachable: the payload failed as a whole but no field did")


#: Types JSON gives back as they were, whatever their value (subclasses are tried).
_SURVIVE = frozenset({str, bool, type(None)})
#: An int within this bound is written and read in one piece (past about 4,300 digits, both
#: refuse: sys.get_int_max_str_digits), and tried past it.
_INT_BOUND = 2**63


def _survives(value: object) -> bool:
    """Whether JSON surely gives `value` back equal, without trying: a str, a bool, None, an int
    within _INT_BOUND, a finite float (NaN comes back unequal; an infinity, which comes back, is
    tried)."""
    if type(value) in _SURVIVE:
        return True
    if type(value) is int:
        return -_INT_BOUND < value < _INT_BOUND
    return type(value) is float and math.isfinite(value)


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(payload_type: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(payload_type)
    if names is None:
        names = _FIELD_NAMES[payload_type] = tuple(f.name for f in dataclasses.fields(payload_type))
    return names


def payload_from_json(
    data: dict[str, Any], payload_type: type[Any], sensitive: bool = False
) -> Any:
    """Build the payload dataclass from decoded JSON, or raise DecodeError saying why not (a
    `sensitive` one without the exception's text, which may quote the payload)."""
    try:
        return payload_type(**data)
    except Exception as exc:  # TypeError for fields, anything from a __post_init__
        if sensitive:
            raise DecodeError(
                f"the payload does not match {payload_type.__qualname__}: {type(exc).__name__} "
                f"(its text not shown: a sensitive job; was the payload class changed while "
                f"this task waited?)"
            ) from None
        raise DecodeError(
            f"the payload does not match {payload_type.__qualname__}: {type(exc).__name__}: "
            f"{exc} (was the payload class changed while this task waited?)"
        ) from exc
