"""What a step run needs besides the replay: its timeout, its backoff, the JSON check."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any, TypeVar

from django_jobs.exceptions import JobTimeout

T = TypeVar("T")

#: A step's delay before its next run: seconds, a function of the failures so far, or None
#: (1 s, 4 s, 15 s, 60 s, then 60 s, each with 10 % jitter).
Backoff = float | timedelta | Callable[[int], float] | None
BACKOFF = (1.0, 4.0, 15.0, 60.0)


def delay_after(backoff: Backoff, failures: int) -> float:
    """Seconds before the next run of a step that has failed `failures` times."""
    if backoff is None:
        base = BACKOFF[min(failures, len(BACKOFF)) - 1]
        return base * random.uniform(0.9, 1.1)
    if isinstance(backoff, timedelta):
        return max(0.0, backoff.total_seconds())
    if callable(backoff):
        value = backoff(failures)
        return max(0.0, value.total_seconds() if isinstance(value, timedelta) else float(value))
    return max(0.0, float(backoff))


class StepTimeout(JobTimeout):
    """A step ran longer than its `timeout`."""


def call_with_timeout(timeout: float | None, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """fn(*args, **kw), interrupted with StepTimeout after `timeout` seconds (on the main
    thread: SIGALRM, as the worker child's own task timeout; the event's own alarm is put back
    after, less the time spent)."""
    if not timeout or threading.current_thread() is not threading.main_thread():
        return fn(*args, **kw)

    def ring(signum: int, frame: FrameType | None) -> None:
        raise StepTimeout(f"step timed out after {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, min(timeout, outer) if outer else timeout)
    try:
        if outer and outer <= timeout:
            signal.signal(signal.SIGALRM, previous)  # the event's own timeout rings first
        return fn(*args, **kw)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            left = outer - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def refuse_non_json(value: Any) -> str:
    """Why value cannot be a step's (or a signal's) value, or "" when it survives JSON."""
    try:
        survived = json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        return (
            f"is a {type(value).__name__}, which JSON cannot encode ({exc}): return str, int, "
            f"float, bool, None, lists and dicts with str keys"
        )
    if survived != value:
        return (
            f"does not survive a JSON round trip ({value!r} comes back as {survived!r}): use "
            f"lists rather than tuples and str keys in dicts"
        )
    return ""
