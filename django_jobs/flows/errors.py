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


class NonDeterministicFlow(FlowError):
    """A replay asked for a step where the run's history has another: the flow's code changed
    the order of its steps (or takes a path that depends on something outside steps) while the
    run was in flight. The run fails with this error rather than mixing two histories."""

    def __init__(self, flow: str, call_id: str, position: int, asked: str, recorded: str) -> None:
        self.position = position
        self.asked = asked
        self.recorded = recorded
        super().__init__(
            f"flow {flow} call {call_id} is not deterministic: at position {position} this "
            f"replay asks for {_label(asked)} where the run's history has {_label(recorded)}. "
            f"Its code changed the order of its steps while the run was in flight: gate the "
            f"change with ctx.version() so that old runs keep their path (docs/flows.rst, "
            f"Versioning), and keep code outside steps deterministic."
        )


def _label(field: str) -> str:
    if field.startswith("("):
        return field[1:-1]
    kind, _, name = field.partition(":")
    return f"{kind} {name!r}" if name else repr(field)
