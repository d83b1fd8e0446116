"""`Signal[T]`: a signal declared on a flow class, so that mypy checks the value sent and the
value waited for.

    class CloseOrder(Flow[CloseOrderInput, Receipt]):
        approved = Signal[bool]("approved")

        def run(self, ctx, input):
            value, received = ctx.wait_for_signal(self.approved)   # value: bool | None
            ...

    CloseOrder.send_signal(call_id, CloseOrder.approved, True)      # mypy: a bool
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from django_jobs.flows.errors import FlowError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Signal(Generic[T]):
    """A signal's name with the type of its value (which must survive JSON, as any signal's)."""

    __slots__ = ("name",)

    def __init__(self, name: str | None = None) -> None:
        """name: the signal's name; by default the attribute's it is declared as on a class
        (`approved = Signal[bool]()` is the signal "approved")."""
        if name is not None and (not isinstance(name, str) or not name or "\n" in name):
            raise FlowError(f"a signal name must be a non-empty str on one line, got {name!r}")
        self.name = name or ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        if not self.name:
            self.name = attribute

    def __repr__(self) -> str:
        return f"Signal({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Signal) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def _value(self) -> T:  # for type checkers only (SignalOf): never called
        raise NotImplementedError


class SignalOf(Protocol[T_co]):
    """A Signal seen by what receives its value (ctx.wait_for_signal): covariant, so that mypy
    infers `value, received = ctx.wait_for_signal(Flow.approved)` as `bool | None` (an
    invariant Signal[T] there meets a mypy inference quirk with tuple unpacking)."""

    @property
    def name(self) -> str: ...

    def _value(self) -> T_co: ...


def signal_name(signal: Signal[Any] | str) -> str:
    """The name of a signal given as a Signal or as its name."""
    if isinstance(signal, Signal):
        if not signal.name:
            raise FlowError("a Signal() without a name must be declared on a class (its name)")
        return signal.name
    return signal
