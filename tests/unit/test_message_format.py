"""The encoded message (message.encode/decode): what this release writes, a worker of the
release before reads, and every version up to message.NEWEST_READ decodes.

The rollout rule: a release writes only a version that the release before it reads, so that
during a rolling deploy a task enqueued by new code runs on an old worker and the other way
round. This release writes what the release before record version 3 wrote (version 1, or 2 for a
message with a trace or the sensitive flag: message.WRITTEN_VERSION) and reads 1 to 3; a later
release may write version 3 once every worker reads it. tests/unit/frozen_message_8f02718.py is
that release's encode and decode, frozen.

Version 3 leaves out the task id and the queue (the record key <ns>:{<q>}:t:<id> holds both:
decode is given them) and options left at their default (idempotency_key None, no trace, not
sensitive); the options a job type's class or the enqueue call chose (max_attempts, timeout,
retention) are always written, so the worker runs with what was enqueued.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest

from django_jobs import message as message_module
from django_jobs.exceptions import InvalidPayload
from django_jobs.message import (
    NEWEST_READ,
    READS,
    WRITTEN_VERSION,
    DecodeError,
    Message,
    decode,
    encode,
    payload_to_json,
)
from tests.unit import frozen_message_8f02718 as before

TASK = "c05246f716b34f7d875f4b9795c6fea2"
PAYLOAD = {"data": "x" * 1024}
OPTIONS = [
    {},
    {"idempotency_key": "greet:ada"},
    {"trace": {"traceparent": "00-ab-cd-01"}},
    {"sensitive": True},
    {"idempotency_key": "k", "trace": {"traceparent": "00-ab-cd-01"}, "sensitive": True},
]


def plain(**options: Any) -> Message:
    return Message(TASK, "bench.Kilo", "default", PAYLOAD, 5, 300.0, 86400.0, **options)


def job_of(raw: str) -> str:
    """The job name as dequeue.lua's job_of and read_fields.lua find it: after the first
    `,"job":"`, up to the next quote."""
    at = raw.index(',"job":"') + len(',"job":"')
    return raw[at : raw.index('"', at)]


# -- what this release writes: the release before reads it --------------------------------


def test_the_written_version_is_one_the_release_before_reads() -> None:
    """The rollout rule. Moving WRITTEN_VERSION to 3 needs a release before it that reads 3:
    freeze that release's decode in place of frozen_message_8f02718 then."""
    assert WRITTEN_VERSION in before.READS
    assert WRITTEN_VERSION in READS
    assert max(READS) == NEWEST_READ


@pytest.mark.parametrize("options", OPTIONS)
def test_encode__writes_what_the_release_before_wrote(options: dict[str, Any]) -> None:
    """Byte for byte: version 1, or 2 with a trace or the flag, with the id and the queue."""
    assert encode(plain(**options)) == before.encode(before.Message(**vars_of(plain(**options))))


@pytest.mark.parametrize("options", OPTIONS)
def test_the_release_before_decodes_what_this_release_writes(options: dict[str, Any]) -> None:
    message = plain(**options)

    read = before.decode(encode(message))

    assert vars_of(read) == vars_of(message)


@pytest.mark.parametrize("options", OPTIONS)
def test_decode__reads_what_this_release_writes(options: dict[str, Any]) -> None:
    message = plain(**options)

    assert decode(encode(message), TASK, "default") == message
    # A version 1 or 2 message says its own id and queue.
    assert decode(encode(message), "other", "low") == message


def test_encode__the_job_name_is_the_first_job_key() -> None:
    """dequeue.lua (job_of) and read_fields.lua find the job as the first `,"job":"`, in the
    version written and in version 3 alike."""
    written = encode(plain(idempotency_key="k"))
    newest = encode(plain(idempotency_key="k"), version=3)

    assert written.startswith(f'{{"v":1,"id":"{TASK}","job":"bench.Kilo",')
    assert newest.startswith('{"v":3,"job":"bench.Kilo",')
    assert job_of(written) == job_of(newest) == "bench.Kilo"


def vars_of(message: Any) -> dict[str, Any]:
    return {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}


# -- version 3: read, and written by encode(version=3) -------------------------------------


def test_encode__version_3_leaves_out_what_the_key_says_and_defaulted_options() -> None:
    body = json.loads(encode(plain(), version=3))

    assert body == {
        "v": 3,
        "job": "bench.Kilo",
        "payload": PAYLOAD,
        "max_attempts": 5,
        "timeout": 300.0,
        "retention": 86400.0,
    }


def test_encode__version_3_options_cost_at_most_90_bytes_over_the_payload() -> None:
    """The message of a 1 KB payload is 1,206 bytes as written (171 over its payload), 1,125 in
    version 3."""
    payload = len(json.dumps(PAYLOAD, separators=(",", ":")))
    overhead = len(encode(plain(), version=3).encode()) - payload

    assert overhead <= 90, encode(plain(), version=3).replace("x" * 1024, "<data>")
    assert len(encode(plain()).encode()) == 1206


@pytest.mark.parametrize("options", OPTIONS)
def test_decode__a_version_3_message_takes_the_id_and_queue_of_its_key(
    options: dict[str, Any],
) -> None:
    message = plain(**options)

    assert decode(encode(message, version=3), TASK, "default") == message
    assert decode(encode(message, version=3), "other", "low") == Message(
        "other", "bench.Kilo", "low", PAYLOAD, 5, 300.0, 86400.0, **options
    )


def test_encode__refuses_a_version_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="writes record versions 2 and 3, not 4"):
        encode(plain(), version=4)


@pytest.mark.parametrize("version", [1, 2])
def test_decode__an_earlier_version_keeps_its_own_id_and_queue(version: int) -> None:
    """As releases before version 3 wrote them (tests/fixtures/task_records_v1.json)."""
    body = {"v": version, "id": TASK, "job": "upgrades.Greet", "queue": "default",
            "payload": {"to": "ada@example.com"}, "max_attempts": 1, "timeout": 300.0,
            "retention": 86400.0, "idempotency_key": None}  # fmt: skip

    message = decode(json.dumps(body), "from-the-key", "from-the-key")

    assert (message.id, message.queue, message.idempotency_key) == (TASK, "default", None)
    assert (message.job, message.max_attempts, message.timeout) == ("upgrades.Greet", 1, 300.0)


def test_decode__an_earlier_version_without_its_id_is_refused() -> None:
    """Versions 1 and 2 always carried the id and queue: one without is not ours."""
    body = {"v": 1, "job": "j", "payload": {}, "max_attempts": 1, "timeout": 1.0, "retention": 0}

    with pytest.raises(DecodeError, match="does not have the expected fields"):
        decode(json.dumps(body), TASK, "default")


def test_decode__a_newer_version_says_to_run_one_release() -> None:
    with pytest.raises(DecodeError, match="has version 4; this worker reads 1 to 3: run the same"):
        decode(encode(plain(), version=3).replace('"v":3', '"v":4'), TASK, "default")


# -- the payload's check and the encoder: the bytes of json's own --------------------------


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Fields:
    a: Any
    b: Any = None


def cycle() -> list[Any]:
    looped: list[Any] = []
    looped.append(looped)
    return looped


PAYLOADS = [
    {"s": 'é ü \u2028 \x00 "q" \\ \ud800', "n": 2**63, "f": -0.0, "big": 1e308},
    {"nested": {"k": [1, 2.5, None, True, {"d": "x"}]}, "inf": float("inf"), "e": []},
    {"k": Level.LOW, "t": (1, 2), "int_keys": {1: "x", 2.5: "y", None: "z"}},
]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("options", OPTIONS)
def test_encode__the_bytes_of_the_release_before(
    payload: dict[str, Any], options: dict[str, Any]
) -> None:
    """The encoder built once writes what json.JSONEncoder.encode wrote, to the byte."""
    message = Message(TASK, "j", "default", payload, 1, 1.0, 0.0, **options)

    assert encode(message) == before.encode(before.Message(**vars_of(message)))
    assert encode(message, version=3) == json.dumps(
        json.loads(encode(message, version=3)), separators=(",", ":"), ensure_ascii=False
    )


def test_encode__without_the_c_encoder_writes_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = [encode(Message(TASK, "j", "q", payload, 1, 1.0, 0.0)) for payload in PAYLOADS]
    monkeypatch.setattr(message_module, "_C_ENCODE", None)

    assert [encode(Message(TASK, "j", "q", payload, 1, 1.0, 0.0)) for payload in PAYLOADS] == fast


def test_encode__a_cycle_raises_json_s_own_error() -> None:
    with pytest.raises(ValueError, match="Circular reference detected"):
        encode(Message(TASK, "j", "q", {"a": cycle()}, 1, 1.0, 0.0))


@pytest.mark.parametrize(
    "value", ["é\ud800", 0, -(2**63) + 1, 2**63 - 1, True, None, 1.5, -0.0, 1e308]
)
def test_payload_to_json__takes_a_plain_field_without_a_round_trip(
    monkeypatch: pytest.MonkeyPatch, value: Any
) -> None:
    """A str, bool, None, int within 2**63 or finite float always comes back as it was."""

    def no_round_trip(obj: Any) -> str:
        raise AssertionError(f"round trip of {obj!r}")

    monkeypatch.setattr(message_module, "_dumps", no_round_trip)

    assert payload_to_json(Fields(value, "x"), Fields) == {"a": value, "b": "x"}


@pytest.mark.parametrize(
    ("value", "kept"),
    [(float("inf"), float("inf")), (Level.LOW, Level.LOW), ([1, "x"], [1, "x"]), (2**64, 2**64)],
    ids=["inf", "int_enum", "list", "int_past_2_63"],
)
def test_payload_to_json__takes_what_survives_a_round_trip(value: Any, kept: Any) -> None:
    assert payload_to_json(Fields("plain", value), Fields) == {"a": "plain", "b": kept}


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("nan"), r"Fields\.b does not survive a JSON round trip \(nan comes back as nan\)"),
        ((1, 2), r"Fields\.b does not survive a JSON round trip \(\(1, 2\) comes back as \[1, 2\]"),
        ({1: "x"}, r"Fields\.b does not survive"),
        (10**5000, r"Fields\.b holds a int, which JSON cannot encode \(Exceeds the limit"),
        (cycle(), r"Fields\.b holds a list, which JSON cannot encode \(Circular reference"),
        (b"x", r"Fields\.b holds a bytes, which JSON cannot encode"),
    ],
    ids=["nan", "tuple", "int_key", "int_of_5001_digits", "cycle", "bytes"],
)
def test_payload_to_json__refuses_what_does_not_survive(value: Any, error: str) -> None:
    with pytest.raises(InvalidPayload, match=error):
        payload_to_json(Fields("plain", value), Fields)
