"""The errors a flow's code and its callers meet."""

from __future__ import annotations

from django_jobs.exceptions import JobsError


class FlowError(JobsError):
    """A flow used the engine wrongly (a step name used twice in one run, a value JSON cannot
    hold, a flow class that is not registered); the message says what to change."""


class UnknownFlow(FlowError, LookupError):
    """No flow class is registered under this name in this process."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"unknown flow {name!r}: is this worker's code up to date? Flow classes are "
            f"discovered from the flows.py module of every installed app."
        )


class StepFailed(FlowError):
    """A step failed for good (its attempts spent, or its value refused); raised where the
    flow called it, on this replay and every later one. Uncaught, it fails the run."""

    def __init__(self, step: str, error: str) -> None:
        self.step = step
        self.error = error
        super().__init__(f"step {step!r} failed: {error}")


class Suspend(BaseException):
    """Internal: the replay stops here until its next event (a sleep, a wait, a backoff, a
    busy call). A BaseException so that flow code's `except Exception` cannot swallow it."""

    def __init__(self, wake_at: float | None = None) -> None:
        self.wake_at = wake_at
        super().__init__()


class ReplayLost(BaseException):
    """Internal: this replay's lease is no longer its own (it expired and another replay took
    the call): it stops and writes nothing more."""


class Canceled(BaseException):
    """Internal: cancel() was asked for this call: the run ends as canceled."""
