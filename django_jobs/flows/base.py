"""`Flow[Input]` / `Flow[Input, Output]`: the base class of every flow, its registry, `start`,
and the typed reads and signals of its class (`get_run`, `send_signal`)."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
import uuid
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from django.db import transaction
from typing_extensions import TypeVar

from django_jobs.flows.errors import FlowError, UnknownFlow
from django_jobs.jobs import _default_name
from django_jobs.message import payload_from_json, payload_to_json

if TYPE_CHECKING:
    from django_jobs.flows.context import Context
    from django_jobs.flows.runs import Run
    from django_jobs.flows.signals import Signal

I = TypeVar("I")  # noqa: E741
#: The output type; `Flow[Input]` is `Flow[Input, None]` (a TypeVar default: typing_extensions).
O = TypeVar("O", default=None)  # noqa: E741
T = TypeVar("T")

#: A call id goes inside Redis key names (and their hash tag): no braces, colons or spaces.
CALL_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


class Flow(Generic[I, O]):
    """Subclass with a dataclass input type (and optionally an output type) and implement
    `run(self, ctx, input)`.

    `run` is replayed from the top on every event of a call: steps already done return their
    memoised value instead of running again. Its one rule: code outside steps must be
    deterministic (the same on every replay), so time, randomness and I/O go in steps.
    """

    #: Registered name; defaults to "<app_label>.<ClassName>". Keep it stable across deploys.
    name: ClassVar[str]
    #: The input dataclass, taken from `Flow[Input]`.
    input_type: ClassVar[type[Any]]
    #: The output type from `Flow[Input, Output]` (None when not given).
    output_type: ClassVar[Any] = None
    #: The version of this flow's code, recorded on each run at its start (Run.version): what
    #: a `ctx.version()` gate answers for a run that went past the gate before it existed.
    version: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        input_type = _input_type(cls)
        if input_type is None:
            return  # still generic: an abstract base for other flows
        cls.input_type = input_type
        cls.output_type = _output_type(cls)
        if not isinstance(cls.version, int) or isinstance(cls.version, bool) or cls.version < 1:
            raise TypeError(f"{cls.__qualname__}.version must be an int, 1 or more")
        if "name" not in cls.__dict__:
            cls.name = _default_name(cls)
        registry.add(cls)

    def run(self, ctx: Context, input: I) -> Any:
        """The story, as plain Python: steps, sleeps, waits. Return the run's output (JSON)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement run(ctx, input)")

    def on_success(self, ctx: Context, output: Any) -> None:
        """Called once the run has succeeded (after its output is recorded)."""

    def on_failure(self, ctx: Context, error: BaseException) -> None:
        """Called once the run has failed (after its error is recorded); not for cancel()."""

    @classmethod
    def start(
        cls,
        input: I,
        *,
        call_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        on_commit: bool | None = None,
    ) -> str:
        """Start a run of this flow with `input` and return its call id.

        A duplicate idempotency key (within JOBS["IDEMPOTENCY_WINDOW"]) returns the call id
        of the run that holds it, starting nothing; so does a call id already started.
        on_commit: start when the surrounding transaction commits (the call id is returned at
        once; a duplicate is then found, and logged, at the commit); None (the default) does so
        inside atomic() if JOBS["ENQUEUE_ON_COMMIT"] is set, as an enqueue does. Under the
        outbox (JOBS["OUTBOX"], use_outbox()) the start is written as its event's outbox row
        instead (in the transaction, if any): the call id is returned at once, and a duplicate
        idempotency key is found, and logged, by the worker that takes the event.
        """
        from django_jobs.conf import get_settings
        from django_jobs.flows.events import outbox_applies, start_call

        data = payload_to_json(input, cls.input_type)
        meta = metadata or {}
        if not isinstance(meta, dict) or json.loads(json.dumps(meta)) != meta:
            raise FlowError(f"metadata must be a dict that survives JSON, got {meta!r}")
        if call_id is None:
            call_id = uuid.uuid4().hex
        elif not (isinstance(call_id, str) and CALL_ID_RE.match(call_id)):
            raise ValueError(
                f"call_id must be 1 to 100 letters, digits, '_', '-' or '.', got {call_id!r}"
            )
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not
                                            idempotency_key):  # fmt: skip
            raise ValueError(f"idempotency_key must be a non-empty str, got {idempotency_key!r}")
        if on_commit is None:
            on_commit = get_settings().enqueue_on_commit
        version = cls.version
        if on_commit and transaction.get_connection().in_atomic_block and not outbox_applies():
            transaction.on_commit(
                lambda: _start_after_commit(cls.name, call_id, data, meta, idempotency_key, version)
            )
            return call_id
        # Under the outbox the start is its event's row, written inside the transaction.
        return start_call(cls.name, call_id, data, meta, idempotency_key, version)

    @classmethod
    def get_run(cls, call_id: str) -> Run[O] | None:
        """The run of a call of this flow, its output typed (a dataclass output comes back as
        that dataclass), or None if there is none or it is another flow's."""
        from django_jobs.flows.runs import get_run

        run: Run[Any] | None = get_run(call_id)
        if run is None or run.flow != cls.name:
            return None
        out_type = cls.output_type
        if run.output is not None and dataclasses.is_dataclass(out_type):
            output = payload_from_json(run.output, out_type)  # type: ignore[arg-type]
            run = dataclasses.replace(run, output=output)
        return run

    @classmethod
    def send_signal(cls, call_id: str, signal: Signal[T], value: T) -> bool:
        """Deliver a typed signal declared on the class (`approved = Signal[bool]("approved")`):
        mypy checks the value's type; as the module's `send_signal` otherwise."""
        from django_jobs.flows.runs import send_signal

        return send_signal(call_id, signal.name, value)


def _start_after_commit(
    flow: str, call_id: str, data: dict[str, Any], meta: dict[str, Any], key: str | None,
    version: int,
) -> None:  # fmt: skip
    """An on-commit start: never raise into the commit (the data has committed)."""
    from django_jobs.exceptions import BrokerUnavailable
    from django_jobs.flows.events import logger, start_call

    try:
        start_call(flow, call_id, data, meta, key, version)
    except BrokerUnavailable as exc:
        logger.error(
            "flow %s: start of call %s after commit failed, so it may never run (the outbox "
            "would have kept it): %s; start it again with the same call_id", flow, call_id, exc,
        )  # fmt: skip


def _input_type(cls: type) -> type[Any] | None:
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Flow):
            arg = typing.get_args(base)[0]
            if isinstance(arg, TypeVar):
                return None
            if not (isinstance(arg, type) and dataclasses.is_dataclass(arg)):
                raise TypeError(f"{cls.__qualname__}: the input type {arg!r} is not a dataclass")
            return arg
    inherited: type[Any] | None = getattr(cls, "input_type", None)
    return inherited


def _output_type(cls: type) -> Any:
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Flow):
            args = typing.get_args(base)
            return args[1] if len(args) > 1 and not isinstance(args[1], TypeVar) else None
    return getattr(cls, "output_type", None)


class FlowRegistry:
    """Flow classes by registered name; the first class of a name keeps it."""

    def __init__(self) -> None:
        self.flows: dict[str, type[Flow[Any, Any]]] = {}
        #: Names registered by more than one class (check django_jobs.E042), with their paths.
        self.conflicts: dict[str, list[str]] = {}

    def add(self, cls: type[Flow[Any, Any]]) -> None:
        existing = self.flows.get(cls.name)
        path = f"{cls.__module__}.{cls.__qualname__}"
        if existing is not None:
            old = f"{existing.__module__}.{existing.__qualname__}"
            if old != path:  # the same path: a module imported again (autoreload)
                self.conflicts.setdefault(cls.name, [old]).append(path)
                return
        self.flows[cls.name] = cls

    def get(self, name: str) -> type[Flow[Any, Any]]:
        """The flow class registered as name, or raise UnknownFlow."""
        try:
            return self.flows[name]
        except KeyError:
            raise UnknownFlow(name) from None


registry = FlowRegistry()
