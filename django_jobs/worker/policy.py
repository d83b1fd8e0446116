"""The outcome policy: what happens to a run now. Every path that ends a run asks it.

The worker child asks it when a handler returns or raises (a failure, JobTimeout, a control
signal, LeaseLost) and when a task cannot run at all (a corrupt record, an unknown job type);
the supervisor asks it when it reaps a child (killed for its timeout, killed after losing its
lease, or dead on its own). It reads nothing and writes nothing: it returns a `Decision`, and
the caller writes it through the broker, under the run's epoch. The rules:

- completed: ack.
- a failure (any exception, JobTimeout included; also the supervisor's kill after the timeout's
  grace): retry after the job's backoff, spending an attempt; dead once max_attempts are spent.
- `Retry(delay)`: retry after delay, no attempt spent and no failure counted, during the task's
  first MAX_FREE_RETRIES deliveries (its epoch counts them); past that, like a failure.
- `Fail(reason)`, `SkipRetry`: dead now, spending the attempt (SkipRetry keeps the traceback).
- LeaseLost, or a child killed after losing its lease: write nothing. The task is another
  worker's now; checking the lease before writing is the epoch guard of every script.
- JobCanceled (an operator canceled the running task; the child raises it for any way the run
  ends once the cancel reached it, see worker/cancels.py), or a child killed after
  JOBS["CANCEL_GRACE"] (or dead on its own) once the cancel reached it: canceled, nothing spent,
  never retried. A lost lease wins over a cancel: the task is no longer this run's to end.
- a crash (the child died on its own): back to pending as a crash; the requeue script sends it
  to dead past JOBS["MAX_CRASHES"].
- a corrupt record (garbage the dequeue reported, a message or payload that does not decode):
  dead now, no attempt spent: no run can fix it.
- an unknown job type: bounce (retry after UNKNOWN_JOB_DELAY, no attempt spent) until
  UNKNOWN_JOB_GRACE has passed since it was first seen, then dead.
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass
from typing import NamedTuple

from django_jobs.exceptions import JobCanceled, LeaseLost, UnknownJob
from django_jobs.jobs import MAX_FREE_RETRIES, Fail, Retry, SkipRetry

#: The longest error line kept with a task, in characters: an exception's message can be huge.
MAX_ERROR = 1_000
#: The longest traceback kept with a task, in characters. Its start (the stack) and its end (the
#: exception raised last) are kept and the middle is cut, so that a huge message cannot push the
#: stack out.
MAX_TRACEBACK = 32_000


class Fate(enum.Enum):
    """What becomes of a run's task."""

    #: Completed.
    ACK = "ack"
    #: Scheduled to run again after `Decision.delay`.
    RETRY = "retry"
    #: Dead.
    KILL = "kill"
    #: Back to pending at once (its worker died under it, or stops: `Decision.crash` says).
    REQUEUE = "requeue"
    #: Nothing is written: the task is another worker's now.
    NOTHING = "nothing"
    #: Canceled: an operator asked the run to stop, and it did (or was stopped).
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer for one run."""

    fate: Fate
    #: RETRY: seconds until the next run.
    delay: float = 0.0
    error: str = ""
    traceback: str = ""
    #: RETRY/KILL: whether the run spends an attempt (and counts as a failure).
    spend: bool = True
    #: RETRY: a bounce of a job type unknown here.
    unknown: bool = False
    #: REQUEUE: the task's worker died under it (counted toward the crash budget).
    crash: bool = False


class Attempt(NamedTuple):
    """One run of a task, as the policy sees it (a tuple: built once per task, cheaply)."""

    #: 1 for the first run, 2 for the first retry, ...
    number: int
    max_attempts: int
    #: The task's deliveries so far, this one included (its epoch).
    deliveries: int
    #: Seconds before the next run if this one fails (the job's backoff for `number`).
    backoff: float


#: The one answer for a run that completed (made once: the hot path asks for it per task).
COMPLETED = Decision(Fate.ACK)


def completed() -> Decision:
    return COMPLETED


def failed(exc: BaseException, attempt: Attempt) -> Decision:
    """A run raised exc. Call inside the `except` block: the traceback is taken from there."""
    if isinstance(exc, LeaseLost):
        return lease_lost()
    if isinstance(exc, JobCanceled):
        return canceled(error_line(exc), current_traceback())
    if isinstance(exc, Retry):
        if attempt.deliveries <= MAX_FREE_RETRIES:
            return Decision(Fate.RETRY, delay=exc.delay, error=error_line(exc), spend=False)
        error = (
            f"{error_line(exc)} (delivery {attempt.deliveries}, past the {MAX_FREE_RETRIES} "
            "free ones: this Retry spends an attempt)"
        )
        return _spent(attempt, error, "", exc.delay)
    if isinstance(exc, Fail):
        trace = current_traceback() if isinstance(exc, SkipRetry) else ""
        return Decision(Fate.KILL, error=error_line(exc), traceback=trace)
    return _spent(attempt, error_line(exc), current_traceback(), attempt.backoff)


def timed_out(attempt: Attempt, timeout: float) -> Decision:
    """The supervisor killed the run's child after its timeout and the grace period."""
    error = f"JobTimeout: timed out after {timeout:g} s (killed after the grace period)"
    return _spent(attempt, error, "", attempt.backoff)


def _spent(attempt: Attempt, error: str, trace: str, delay: float) -> Decision:
    if attempt.number >= attempt.max_attempts:
        return Decision(Fate.KILL, error=error, traceback=trace)
    return Decision(Fate.RETRY, delay=delay, error=error, traceback=trace)


def crashed(reason: str) -> Decision:
    """The run's child died on its own (a segfault, the OOM killer, os._exit)."""
    return Decision(Fate.REQUEUE, error=reason, crash=True)


def handed_back(reason: str) -> Decision:
    """The run was stopped, or never started: back to pending, nothing spent."""
    return Decision(Fate.REQUEUE, error=reason, spend=False)


def canceled(error: str, trace: str = "") -> Decision:
    """The run stopped for its cancel (JobCanceled, or its child stopped after the cancel)."""
    return Decision(Fate.CANCEL, error=error, traceback=trace, spend=False)


def stopped_for_cancel(how: str) -> Decision:
    """The run's child is gone after the cancel reached it (killed after the grace, dead on its
    own, or stopped with the worker): `how`, in words."""
    return canceled(f"JobCanceled: {how}")


def lease_lost() -> Decision:
    """The run lost its lease (LeaseLost, or its child killed after it): write nothing."""
    return Decision(Fate.NOTHING)


def corrupt(problem: str) -> Decision:
    """The task's record cannot be used as it is: no run can fix it."""
    return Decision(Fate.KILL, error=problem, spend=False)


def unknown(
    exc: UnknownJob, first_seen: float | None, now: float, grace: float, delay: float
) -> Decision:
    """No job class is registered under the task's name here (a rolling deploy, or gone).

    first_seen and now are Redis TIME in epoch seconds.
    """
    if first_seen is not None and now - first_seen >= grace:
        return corrupt(f"{exc} (bounced for {grace:g}s)")
    return Decision(Fate.RETRY, delay=delay, error=str(exc), spend=False, unknown=True)


def _text(exc: BaseException) -> str:
    """str(exc), or what went wrong trying: an exception's __str__ may itself raise."""
    try:
        return str(exc)
    except Exception as failure:
        try:
            why = f"{type(failure).__name__}: {failure}"
        except Exception:
            why = type(failure).__name__
        return f"<str() failed: {why}>"


def error_line(exc: BaseException) -> str:
    """The first line of an exception's message after its type, bounded; never raises."""
    text = _text(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 3] + "..."


def current_traceback() -> str:
    """The traceback of the exception being handled, bounded to MAX_TRACEBACK."""
    text = traceback.format_exc()
    if len(text) <= MAX_TRACEBACK:
        return text
    half = MAX_TRACEBACK // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n... ({cut} characters cut) ...\n{text[-half:]}"
