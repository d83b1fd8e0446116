"""The outcome policy as a table: (the run, what happened) -> what becomes of its task."""

from __future__ import annotations

import pytest

from django_jobs.exceptions import JobTimeout, LeaseLost, UnknownJob
from django_jobs.jobs import MAX_FREE_RETRIES, Fail, Retry, SkipRetry
from django_jobs.worker import policy
from django_jobs.worker.policy import Attempt, Decision, Fate

FIRST = Attempt(number=1, max_attempts=3, deliveries=1, backoff=4.0)
LAST = Attempt(number=3, max_attempts=3, deliveries=3, backoff=15.0)
MANY = Attempt(number=1, max_attempts=3, deliveries=MAX_FREE_RETRIES + 1, backoff=4.0)
MANY_LAST = Attempt(number=3, max_attempts=3, deliveries=MAX_FREE_RETRIES + 1, backoff=4.0)


def raised(exc: BaseException, attempt: Attempt) -> Decision:
    """The policy's answer inside the except block, as the processor asks it."""
    try:
        raise exc
    except BaseException as caught:
        return policy.failed(caught, attempt)


# (the run, what it raised) -> (fate, delay, spend, error, whether a traceback is kept)
FAILURES = [
    ("a failure, attempts left", FIRST, ValueError("boom"),
     (Fate.RETRY, 4.0, True, "ValueError: boom", True)),
    ("a failure, the last attempt", LAST, ValueError("boom"),
     (Fate.KILL, 0.0, True, "ValueError: boom", True)),
    ("JobTimeout in the child, attempts left", FIRST, JobTimeout("timed out after 1 s"),
     (Fate.RETRY, 4.0, True, "JobTimeout: timed out after 1 s", True)),
    ("JobTimeout on the last attempt", LAST, JobTimeout("timed out after 1 s"),
     (Fate.KILL, 0.0, True, "JobTimeout: timed out after 1 s", True)),
    ("Retry(delay) early", FIRST, Retry(delay=30, reason="rate limited"),
     (Fate.RETRY, 30.0, False, "Retry: rate limited", False)),
    ("Retry(delay) on the last attempt, early: still free", LAST, Retry(delay=30),
     (Fate.RETRY, 30.0, False, "Retry: retry in 30s", False)),
    ("Retry past the free deliveries: spends an attempt", MANY, Retry(delay=2),
     (Fate.RETRY, 2.0, True, None, False)),
    ("Retry past the free deliveries, last attempt: dead", MANY_LAST, Retry(delay=2),
     (Fate.KILL, 0.0, True, None, False)),
    ("Fail(reason): dead now, no traceback", FIRST, Fail("card declined"),
     (Fate.KILL, 0.0, True, "Fail: card declined", False)),
    ("SkipRetry: dead now, with its traceback", FIRST, SkipRetry("template gone"),
     (Fate.KILL, 0.0, True, "SkipRetry: template gone", True)),
    ("LeaseLost: nothing written", FIRST, LeaseLost("task t lost its lease"),
     (Fate.NOTHING, 0.0, True, "", False)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "attempt", "exc", "expected"), FAILURES, ids=[c[0] for c in FAILURES]
)
def test_failed__decides_by_what_was_raised_and_the_attempt(
    case: str, attempt: Attempt, exc: BaseException, expected: tuple[object, ...]
) -> None:
    fate, delay, spend, error, has_traceback = expected

    decision = raised(exc, attempt)

    assert (decision.fate, decision.delay, decision.spend) == (fate, delay, spend)
    if error is not None:
        assert decision.error == error
    else:
        assert "past the 20 free ones: this Retry spends an attempt" in decision.error
    assert bool(decision.traceback) == has_traceback
    if has_traceback:
        assert type(exc).__name__ in decision.traceback


# (what the supervisor or the processor saw) -> decision
OTHERS = [
    ("timeout kill, attempts left", policy.timed_out(FIRST, 1.5),
     Decision(Fate.RETRY, delay=4.0,
              error="JobTimeout: timed out after 1.5 s (killed after the grace period)")),
    ("timeout kill, the last attempt", policy.timed_out(LAST, 1.5),
     Decision(Fate.KILL,
              error="JobTimeout: timed out after 1.5 s (killed after the grace period)")),
    ("crash", policy.crashed("worker child 7 died (killed by SIGKILL) while running it"),
     Decision(Fate.REQUEUE, error="worker child 7 died (killed by SIGKILL) while running it",
              crash=True)),
    ("handed back on stop", policy.handed_back("stopped"),
     Decision(Fate.REQUEUE, error="stopped", spend=False)),
    ("lease lost (child killed after it)", policy.lease_lost(), Decision(Fate.NOTHING)),
    ("corrupt record", policy.corrupt("enqueued_at is not a number: 'abc'"),
     Decision(Fate.KILL, error="enqueued_at is not a number: 'abc'", spend=False)),
    ("unknown job, first seen now", policy.unknown(UnknownJob("x.Gone"), None, 1000.0, 60, 5),
     Decision(Fate.RETRY, delay=5, error=str(UnknownJob("x.Gone")), spend=False, unknown=True)),
    ("unknown job, within the grace", policy.unknown(UnknownJob("x.Gone"), 950.0, 1000.0, 60, 5),
     Decision(Fate.RETRY, delay=5, error=str(UnknownJob("x.Gone")), spend=False, unknown=True)),
    ("unknown job, past the grace", policy.unknown(UnknownJob("x.Gone"), 900.0, 1000.0, 60, 5),
     Decision(Fate.KILL, error=f"{UnknownJob('x.Gone')} (bounced for 60s)", spend=False)),
    ("completed", policy.completed(), Decision(Fate.ACK)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "decision", "expected"), OTHERS, ids=[c[0] for c in OTHERS])
def test_policy__decides_every_other_end_of_a_run(
    case: str, decision: Decision, expected: Decision
) -> None:
    assert decision == expected


def test_retry__refuses_a_negative_nan_or_infinite_delay() -> None:
    with pytest.raises(ValueError, match="must be 0 or more seconds"):
        Retry(delay=-1)
    with pytest.raises(ValueError, match="must be 0 or more seconds"):
        Retry(delay=float("nan"))
    with pytest.raises(ValueError, match="must be 0 or more seconds"):
        Retry(delay=float("inf"))


def test_error_line__survives_a_str_that_raises_and_is_bounded() -> None:
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert policy.error_line(Nasty()) == "Nasty: <str() failed: RuntimeError: no>"
    assert len(policy.error_line(ValueError("x" * 5000))) == policy.MAX_ERROR
