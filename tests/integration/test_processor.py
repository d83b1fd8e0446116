"""The processor on the real Redis, through Job classes of this module and `run_burst`: what a
run's outcome writes (ack, retry with backoff, dead), and how records it cannot run are handled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs import Job
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.broker.redis import COUNTER_TTL
from django_jobs.client import JobHandle, get_broker
from django_jobs.message import RECORD_EVICTED
from django_jobs.testing import run_burst
from django_jobs.worker.policy import MAX_ERROR, MAX_TRACEBACK
from django_jobs.worker.processor import Outcome, Processor
from tests.conftest import RedisNamespace, wait_until
from tests.redis_state import q, redis_now, snapshot, t

# -- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Greeting:
    name: str


#: (job, payload name, attempt) of every run, in order.
ran: list[tuple[str, str, int]] = []


class Greet(Job[Greeting]):
    def run(self, payload: Greeting) -> None:
        ran.append(("greet", payload.name, self.context.attempt))


class Fail(Job[Greeting]):
    def run(self, payload: Greeting) -> None:
        ran.append(("fail", payload.name, self.context.attempt))
        raise ValueError(f"boom on attempt {self.context.attempt}\nsecond line of the message")


class LoseLease(Job[Greeting]):
    """Loses its lease mid-run: the lease is backdated and the task recovered, as if the worker
    had frozen past its lease and another process had taken over."""

    def run(self, payload: Greeting) -> None:
        broker = get_broker()
        lease = broker.keys(self.context.queue).lease
        broker.client.zadd(lease, {self.context.job_id: 0})
        assert broker.recover(self.context.queue) == [(self.context.job_id, "pending")]


@dataclass(frozen=True)
class Checked:
    count: int

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count must not be negative, got {self.count}")


class CheckedJob(Job[Checked]):
    def run(self, payload: Checked) -> None:
        ran.append(("checked", str(payload.count), self.context.attempt))


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    ran.clear()


def message(handle: JobHandle, payload: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The decoded `msg` of a task enqueued with the defaults of the test settings, as this
    release writes it (message.WRITTEN_VERSION: version 1 without a trace or the flag)."""
    return {
        "v": 1,
        "id": handle.id,
        "job": handle.job,
        "queue": handle.queue,
        "payload": payload,
        "max_attempts": 5,
        "timeout": 300.0,
        "retention": 86400.0,
        "idempotency_key": None,
        **fields,
    }


def write(ns: RedisNamespace, task_id: str, fields: dict[str, str | bytes]) -> None:
    """Write a task record by hand, as pending (what a bug or an operator might leave)."""
    k = get_broker().keys("default")
    if fields:
        ns.client.hset(k.task(task_id), mapping=fields)
    ns.client.lpush(k.pending, task_id)


def raw_message(task_id: str, job: str, payload: dict[str, Any], **fields: Any) -> str:
    body = {
        "v": 1,
        "id": task_id,
        "job": job,
        "queue": "default",
        "payload": payload,
        "max_attempts": 5,
        "timeout": 300.0,
        "retention": 86400.0,
        "idempotency_key": None,
        **fields,
    }
    return json.dumps(body)


def hand_enqueue(task_id: str, encoded: str) -> None:
    """Enqueue an encoded message through the broker, bypassing the Job API's checks."""
    assert get_broker().enqueue([EnqueueRequest(task_id, "default", encoded)])[0].state == "pending"


# -- success ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention", "kept"),
    [pytest.param(None, True, id="kept_for_retention"), pytest.param(0, False, id="retention_0")],
)
def test_process__success_acks(redis_ns: RedisNamespace, retention: int | None, kept: bool) -> None:
    handle = Greet.enqueue(Greeting("ada"), retention=retention)

    outcomes = run_burst()

    assert outcomes == [Outcome(handle.id, Greet.name, "default", "completed")]
    assert ran == [("greet", "ada", 1)]
    expected: dict[str, Any] = {
        q("processed:<day>"): ("string", "1", COUNTER_TTL),
        q("wake"): ("list", ["1"]),
    }
    if kept:
        expected[t(handle.id)] = (
            "hash",
            {
                "msg": message(handle, {"name": "ada"}),
                "state": "completed",
                "enqueued_at": "now",
                "started_at": "now",
                "completed_at": "now",
                "epoch": "1",
            },
        )
        expected[q("completed")] = ("zset", [(handle.id, "now+86400")])
    assert snapshot(redis_ns) == expected


def test_process__through_a_processor_of_its_own(redis_ns: RedisNamespace) -> None:
    low = Greet.enqueue(Greeting("low"), queue="low")
    critical = Greet.enqueue(Greeting("critical"), queue="critical")
    processor = Processor(get_broker(), ["critical", "low"], hygiene=False)

    outcomes = [processor.process_one(), processor.process_one(), processor.process_one()]

    assert outcomes == [
        Outcome(critical.id, Greet.name, "critical", "completed"),
        Outcome(low.id, Greet.name, "low", "completed"),
        None,
    ]


# -- failures -----------------------------------------------------------------------------------


def test_process__exception_goes_to_retry_with_error_and_traceback(
    redis_ns: RedisNamespace,
) -> None:
    handle = Fail.enqueue(Greeting("ada"))
    before = redis_now(redis_ns.client)

    outcomes = run_burst()

    after = redis_now(redis_ns.client)
    error = "ValueError: boom on attempt 1"
    assert outcomes == [Outcome(handle.id, Fail.name, "default", "retry", error)]
    snap = snapshot(redis_ns)
    record = snap[t(handle.id)][1]
    traceback = record.pop("traceback")
    # The jittered delay (0.9-1.1 s) reads as now+1 or now+2 once rounded up: checked exactly below.
    assert record.pop("next_at") in ("now+1", "now+2")
    ((_, due),) = snap.pop(q("retry"))[1]
    assert due in ("now+1", "now+2")
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "in run\n" in traceback
    assert traceback.endswith("ValueError: boom on attempt 1\nsecond line of the message\n")
    assert snap == {
        t(handle.id): (
            "hash",
            {
                "msg": message(handle, {"name": "ada"}),
                "state": "retry",
                "enqueued_at": "now",
                "started_at": "now",
                "failed_at": "now",
                "attempts": "1",
                "epoch": "1",
                "error": error,
            },
        ),
        q("failed:<day>"): ("string", "1", COUNTER_TTL),
        q("wake"): ("list", ["1"]),
    }
    # The first retry is due about 1 s (within 10 %) after the failure, by Redis' clock.
    score = redis_ns.client.zscore(get_broker().keys("default").retry, handle.id)
    assert score is not None
    assert before + 0.9 <= score <= after + 1.1


@pytest.mark.parametrize(("attempt", "base"), [(1, 1.0), (2, 4.0), (3, 15.0), (4, 60.0)])
def test_backoff__close_to_1_4_15_60_seconds(attempt: int, base: float) -> None:
    delays = [Fail.backoff(attempt) for _ in range(2000)]

    assert all(base * 0.9 <= delay <= base * 1.1 for delay in delays), (min(delays), max(delays))
    # Jittered, so that tasks that failed together do not all come back together.
    assert len(set(delays)) > 1000
    assert min(delays) < base * 0.95
    assert max(delays) > base * 1.05


def test_process__fifth_failure_goes_dead_with_its_error(redis_ns: RedisNamespace) -> None:
    handle = Fail.enqueue(Greeting("ada"))
    broker = get_broker()
    outcomes = []

    for n in range(5):
        if n:
            # Retry now instead of waiting out the backoff.
            assert broker.run_now("default", handle.id, "retry")
        outcomes += run_burst()

    errors = [f"ValueError: boom on attempt {n}" for n in range(1, 6)]
    assert outcomes == [
        *(Outcome(handle.id, Fail.name, "default", "retry", e) for e in errors[:4]),
        Outcome(handle.id, Fail.name, "default", "dead", errors[4]),
    ]
    assert ran == [("fail", "ada", n) for n in range(1, 6)]
    snap = snapshot(redis_ns)
    record = snap[t(handle.id)][1]
    assert record.pop("traceback").endswith(
        "ValueError: boom on attempt 5\nsecond line of the message\n"
    )
    assert snap == {
        t(handle.id): (
            "hash",
            {
                "msg": message(handle, {"name": "ada"}),
                "state": "dead",
                "enqueued_at": "now",
                "started_at": "now",
                "failed_at": "now",
                "died_at": "now",
                "attempts": "5",
                "epoch": "5",
                "error": errors[4],
            },
        ),
        q("dead"): ("zset", [(handle.id, "now")]),
        q("failed:<day>"): ("string", "5", COUNTER_TTL),
        q("wake"): ("list", ["1"] * 5),
    }


def test_process__max_attempts_per_enqueue(redis_ns: RedisNamespace) -> None:
    handle = Fail.enqueue(Greeting("ada"), max_attempts=2)
    broker = get_broker()

    first = run_burst()
    score = redis_ns.client.zscore(broker.keys("default").retry, handle.id)
    redis_ns.client.zadd(broker.keys("default").retry, {handle.id: 0})  # due now
    second = run_burst()

    assert score is not None
    assert [o.state for o in first + second] == ["retry", "dead"]
    assert redis_ns.client.hget(broker.keys("default").task(handle.id), "attempts") == b"2"


class Shout(Job[Greeting]):
    """Fails with a one-line message of a million characters."""

    def run(self, payload: Greeting) -> None:
        raise ValueError("x" * 1_000_000)


def test_process__huge_exception_message_keeps_a_bounded_error_and_the_stack(
    redis_ns: RedisNamespace,
) -> None:
    # Found by the reliability battery (tests/chaos, bad input): the whole message was kept as
    # the error "line", and the traceback kept only its last 32,000 characters, all of them "x".
    handle = Shout.enqueue(Greeting("ada"), max_attempts=1)

    (outcome,) = run_burst()

    key = get_broker().keys("default").task(handle.id)
    error, traceback = (v.decode() for v in redis_ns.client.hmget(key, ["error", "traceback"]))
    assert outcome.state == "dead"
    assert outcome.error == error
    assert error.startswith("ValueError: xxx")
    assert error.endswith("x...")
    assert len(error) == MAX_ERROR
    assert len(traceback) < MAX_TRACEBACK + 100
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "in run\n" in traceback  # the stack is kept...
    assert "characters cut) ...\n" in traceback  # ...the middle of the message is not...
    assert traceback.endswith("xxx\n")  # ...and its end is


def test_process__stale_outcome_after_losing_the_lease_is_not_written(
    redis_ns: RedisNamespace,
) -> None:
    handle = LoseLease.enqueue(Greeting("ada"))

    outcome = Processor(get_broker(), hygiene=False).process_one()

    assert outcome == Outcome(handle.id, LoseLease.name, "default", "stale")
    snap = snapshot(redis_ns)
    assert snap[t(handle.id)][1]["state"] == "pending"
    assert snap[t(handle.id)][1]["crashes"] == "1"
    assert snap[t(handle.id)][1]["epoch"] == "2"
    assert snap[q("pending")] == ("list", [handle.id])
    assert q("completed") not in snap
    assert q("processed:<day>") not in snap


# -- records that cannot run --------------------------------------------------------------------

GOOD = raw_message("x", "tests.integration.test_processor.Greet", {"name": "ada"})


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param(
            {"msg": "{not json", "state": "pending"},
            "the task record is not valid JSON: Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1)",
            id="bad_json",
        ),
        pytest.param(
            {"msg": b'{"v": 1, "job": "\xff"}', "state": "pending"},
            "the task record is not valid JSON: 'utf-8' codec can't decode byte 0xff in "
            "position 17: invalid start byte",
            id="not_utf8",
        ),
        pytest.param({"state": "pending", "attempts": "0"}, RECORD_EVICTED, id="no_msg"),
        pytest.param({}, RECORD_EVICTED, id="no_record_at_all"),
        pytest.param(
            {"msg": GOOD.replace('"v": 1', '"v": 4'), "state": "pending"},
            "the task record has version 4; this worker reads 1 to 3: run the same "
            "django-jobs release on every worker",
            id="newer_version",
        ),
        pytest.param(
            {"msg": GOOD.replace('"v": 1, ', ""), "state": "pending"},
            "the task record has version None; this worker reads 1 to 3: run the same "
            "django-jobs release on every worker",
            id="no_version",
        ),
        pytest.param(
            {"msg": "[1, 2]", "state": "pending"},
            "the task record is a JSON list, not an object",
            id="not_an_object",
        ),
        pytest.param(
            {"msg": GOOD.replace('"timeout": 300.0, ', ""), "state": "pending"},
            "the task record does not have the expected fields: Message.__init__() missing 1 "
            "required positional argument: 'timeout'",
            id="missing_field",
        ),
        pytest.param(
            {"msg": GOOD.replace('"payload": {"name": "ada"}', '"payload": "ada"')},
            "the task record has fields of the wrong type: payload",
            id="payload_not_an_object",
        ),
    ],
)
def test_process__corrupt_record_goes_dead(
    redis_ns: RedisNamespace, fields: dict[str, str | bytes], error: str
) -> None:
    write(redis_ns, "x", fields)

    outcomes = run_burst()

    full = error if error == RECORD_EVICTED else f"could not decode the task record: {error}"
    assert outcomes == [Outcome("x", "?", "default", "dead", full)]
    expected = {
        **fields,
        "state": "dead",
        "epoch": "1",
        "started_at": "now",
        "failed_at": "now",
        "died_at": "now",
        "error": full,
        "traceback": "",
    }
    k = get_broker().keys("default")
    # The message is kept as it was, for whoever looks into it.
    msg = fields.get("msg")
    assert redis_ns.client.hget(k.task("x"), "msg") == (
        msg.encode() if isinstance(msg, str) else msg
    )
    expected.pop("msg", None)
    snap = snapshot(redis_ns)
    snap[t("x")][1].pop("msg", None)
    assert snap == {
        t("x"): ("hash", expected),
        q("dead"): ("zset", [("x", "now")]),
        q("failed:<day>"): ("string", "1", COUNTER_TTL),
    }
    assert ran == []


@pytest.mark.parametrize(
    ("job", "field"),
    [
        pytest.param(Greet, {"timeout": "soon"}, id="timeout_not_a_number"),
        pytest.param(Fail, {"max_attempts": "five"}, id="max_attempts_not_a_number"),
        pytest.param(Greet, {"retention": None}, id="retention_null"),
    ],
)
def test_process__record_with_a_wrongly_typed_field_goes_dead(
    redis_ns: RedisNamespace, job: type[Job[Greeting]], field: dict[str, Any]
) -> None:
    # Given a record that is valid JSON with every field, but one holds the wrong type
    write(redis_ns, "x", {"msg": raw_message("x", job.name, {"name": "ada"}, **field)})

    # When a burst runs it, it must neither crash nor strand the task in active
    outcomes = run_burst()

    # Then the task is dead with an error that names the record as the problem
    state = redis_ns.client.hget(get_broker().keys("default").task("x"), "state")
    assert [o.state for o in outcomes] == ["dead"]
    assert state == b"dead"
    assert outcomes[0].error.startswith("could not decode the task record")


def test_process__payload_not_matching_the_dataclass_goes_dead(
    redis_ns: RedisNamespace,
) -> None:
    hand_enqueue("extra", raw_message("extra", Greet.name, {"name": "ada", "nom": "x"}))
    hand_enqueue("missing", raw_message("missing", Greet.name, {}))

    outcomes = {o.task_id: o for o in run_burst()}

    hint = "(was the payload class changed while this task waited?)"
    assert outcomes == {
        "extra": Outcome(
            "extra",
            Greet.name,
            "default",
            "dead",
            "the payload does not match Greeting: TypeError: Greeting.__init__() got an unexpected "
            f"keyword argument 'nom' {hint}",
        ),
        "missing": Outcome(
            "missing",
            Greet.name,
            "default",
            "dead",
            "the payload does not match Greeting: TypeError: Greeting.__init__() missing 1 "
            "required "
            f"positional argument: 'name' {hint}",
        ),
    }
    snap = snapshot(redis_ns)
    for task_id, outcome in outcomes.items():
        record = snap[t(task_id)][1]
        assert (record["state"], record.get("attempts", "0"), record["error"]) == (
            "dead",
            "0",
            outcome.error,
        )
    assert snap[q("dead")][1] == [("extra", "now"), ("missing", "now")]
    assert ran == []


def test_process__payload_refused_by_its_dataclass_does_not_strand_the_task(
    redis_ns: RedisNamespace,
) -> None:
    # Given a payload the dataclass itself refuses (its __post_init__ raises ValueError)
    hand_enqueue("neg", raw_message("neg", CheckedJob.name, {"count": -1}))

    # When a burst runs it, it must not crash and the task must not stay active
    outcomes = run_burst()

    state = redis_ns.client.hget(get_broker().keys("default").task("neg"), "state")
    assert [o.state for o in outcomes] in (["dead"], ["retry"])
    assert state in (b"dead", b"retry")
    assert ran == []


# -- unknown job types --------------------------------------------------------------------------

UNKNOWN = "tests.integration.test_processor.NotDeployedYet"


def test_process__unknown_job_bounces_then_goes_dead(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS = {**settings.JOBS, "UNKNOWN_JOB_DELAY": 60, "UNKNOWN_JOB_GRACE": 1}
    hand_enqueue("u", raw_message("u", UNKNOWN, {}))
    broker = get_broker()
    k = broker.keys("default")
    error = (
        f"unknown job type {UNKNOWN!r}: is this worker's code up to date? Job classes are "
        f"discovered from the jobs.py module of every installed app."
    )

    # First sighting: back to retry after UNKNOWN_JOB_DELAY, no attempt spent.
    assert run_burst() == [Outcome("u", UNKNOWN, "default", "retry", error)]
    first = snapshot(redis_ns)
    first_seen = redis_ns.client.hget(k.task("u"), "first_unknown_at")
    assert first[t("u")][1] | {"msg": None} == {
        "msg": None,
        "state": "retry",
        "enqueued_at": "now",
        "started_at": "now",
        "failed_at": "now",
        "first_unknown_at": "now",
        "next_at": "now+60",
        "epoch": "1",
        "error": error,
        "traceback": "",
    }
    assert first[q("retry")] == ("zset", [("u", "now+60")])
    assert q("failed:<day>") not in first

    # Within the grace: bounced again, the first sighting kept.
    assert broker.run_now("default", "u", "retry")
    assert run_burst() == [Outcome("u", UNKNOWN, "default", "retry", error)]
    assert redis_ns.client.hget(k.task("u"), "first_unknown_at") == first_seen
    assert redis_ns.client.hget(k.task("u"), "attempts") is None  # none spent (reads as 0)

    # Past the grace: dead, still without spending an attempt.
    assert first_seen is not None
    # The grace is measured on Redis' clock, like the first sighting.
    wait_until(lambda: redis_now(redis_ns.client) - float(first_seen) >= 1.05, timeout=5)
    assert broker.run_now("default", "u", "retry")
    outcomes = run_burst()

    assert outcomes == [Outcome("u", UNKNOWN, "default", "dead", f"{error} (bounced for 1s)")]
    record = snapshot(redis_ns)[t("u")][1]
    assert (record["state"], record.get("attempts", "0"), record["error"]) == (
        "dead",
        "0",
        f"{error} (bounced for 1s)",
    )


def test_process__unknown_job_runs_once_its_code_is_deployed(redis_ns: RedisNamespace) -> None:
    hand_enqueue("late", raw_message("late", UNKNOWN, {"name": "ada"}))
    assert [o.state for o in run_burst()] == ["retry"]

    class NotDeployedYet(Job[Greeting]):
        name = UNKNOWN

        def run(self, payload: Greeting) -> None:
            ran.append(("deployed", payload.name, self.context.attempt))

    try:
        assert get_broker().run_now("default", "late", "retry")
        assert run_burst() == [Outcome("late", UNKNOWN, "default", "completed")]
    finally:
        from django_jobs.jobs import registry

        registry.jobs.pop(UNKNOWN, None)
    # The bounce spent no attempt: the run is the first.
    assert ran == [("deployed", "ada", 1)]


def test_process__record_with_garbage_counters_still_runs(redis_ns: RedisNamespace) -> None:
    # A record edited by hand: counters that are not numbers must not strand the task.
    handle = Greet.enqueue(Greeting("ada"))
    key = get_broker().keys("default").task(handle.id)
    redis_ns.client.hset(key, mapping={"attempts": "x", "crashes": "y", "epoch": "z"})

    outcomes = run_burst()

    assert [(o.task_id, o.state) for o in outcomes] == [(handle.id, "completed")]


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class FailUnprintably(Job[Greeting]):
    """Fails with an exception whose __str__ raises."""

    def run(self, payload: Greeting) -> None:
        raise Unprintable()


def test_process__exception_whose_str_raises_is_recorded_with_its_traceback(
    redis_ns: RedisNamespace,
) -> None:
    # Found trying it (issue 12): formatting the error raised inside the worker, which crashed
    # the child three times; the task went dead "crashed its worker 3 times" with no traceback.
    handle = FailUnprintably.enqueue(Greeting("ada"), max_attempts=1)

    (outcome,) = run_burst()

    key = get_broker().keys("default").task(handle.id)
    error, traceback = (v.decode() for v in redis_ns.client.hmget(key, ["error", "traceback"]))
    assert (outcome.state, redis_ns.client.hget(key, "crashes")) == ("dead", None)  # no crash
    assert error == outcome.error
    assert error == "Unprintable: <str() failed: RuntimeError: no text for you>"
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "in run\n" in traceback
    assert "Unprintable" in traceback


def test_outcome__dead_after_one_attempt_says_attempt(
    redis_ns: RedisNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    Fail.enqueue(Greeting("ada"), max_attempts=1)

    run_burst()

    assert "dead after 1 attempt: ValueError" in caplog.text


@pytest.mark.parametrize(
    ("field", "garbage"), [("enqueued_at", "abc"), ("first_unknown_at", "soon")]
)
def test_process__garbage_time_in_the_record_is_dead_at_once_unspent(
    redis_ns: RedisNamespace, field: str, garbage: str
) -> None:
    # Found trying it (issue 12): garbage in a time field crashed the worker under the task.
    handle = Greet.enqueue(Greeting("ada"))
    key = get_broker().keys("default").task(handle.id)
    redis_ns.client.hset(key, field, garbage)

    (outcome,) = run_burst()

    error = f"{field} is not a number: {garbage!r}"
    assert outcome == Outcome(handle.id, Greet.name, "default", "dead", error)
    assert ran == []
    record = redis_ns.client.hgetall(key)
    assert (record[b"state"], record.get(b"attempts", b"0"), record[b"error"]) == (
        b"dead",
        b"0",
        error.encode(),
    )
