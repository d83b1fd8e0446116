"""The encoded message (message.encode/decode, VERSION 3): it carries what the record's key
cannot say, and every earlier version still decodes.

Version 3 leaves out the task id and the queue (the record key <ns>:{<q>}:t:<id> holds both:
decode is given them) and options left at their default (idempotency_key None, no trace, not
sensitive); the options a job type's class or the enqueue call chose (max_attempts, timeout,
retention) are always written, so the worker runs with what was enqueued.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_jobs.message import VERSION, DecodeError, Message, decode, encode

TASK = "c05246f716b34f7d875f4b9795c6fea2"
PAYLOAD = {"data": "x" * 1024}


def plain(**options: Any) -> Message:
    return Message(TASK, "bench.Kilo", "default", PAYLOAD, 5, 300.0, 86400.0, **options)


def test_encode__leaves_out_what_the_key_says_and_defaulted_options() -> None:
    body = json.loads(encode(plain()))

    assert body == {
        "v": VERSION,
        "job": "bench.Kilo",
        "payload": PAYLOAD,
        "max_attempts": 5,
        "timeout": 300.0,
        "retention": 86400.0,
    }
    assert VERSION == 3


def test_encode__the_options_cost_at_most_90_bytes_over_the_payload() -> None:
    """The message of a 1 KB payload was 1,206 bytes in version 1 (182 over its payload)."""
    overhead = len(encode(plain()).encode()) - len(json.dumps(PAYLOAD, separators=(",", ":")))

    assert overhead <= 90, encode(plain()).replace("x" * 1024, "<data>")


def test_encode__the_job_name_is_the_first_job_key_after_the_version() -> None:
    """dequeue.lua (job_of) and read_fields.lua find the job as the first `,"job":"`."""
    assert encode(plain(idempotency_key="k")).startswith('{"v":3,"job":"bench.Kilo",')


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"idempotency_key": "greet:ada"},
        {"trace": {"traceparent": "00-ab-cd-01"}},
        {"sensitive": True},
        {"idempotency_key": "k", "trace": {"traceparent": "00-ab-cd-01"}, "sensitive": True},
    ],
)
def test_decode__a_version_3_message_takes_the_id_and_queue_of_its_key(
    options: dict[str, Any],
) -> None:
    message = plain(**options)

    assert decode(encode(message), TASK, "default") == message
    assert decode(encode(message), "other", "low") == Message(
        "other", "bench.Kilo", "low", PAYLOAD, 5, 300.0, 86400.0, **options
    )


@pytest.mark.parametrize("version", [1, 2])
def test_decode__an_earlier_version_keeps_its_own_id_and_queue(version: int) -> None:
    """As releases before VERSION 3 wrote them (tests/fixtures/task_records_v1.json)."""
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
        decode(encode(plain()).replace('"v":3', '"v":4'), TASK, "default")
