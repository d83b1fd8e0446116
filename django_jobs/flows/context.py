"""`ctx`, what a flow's `run` is given: steps, sleeps, waits for signals, parallel steps.

A replay holds the call's lease under its epoch; everything here reads the state the replay
was handed (one round trip, at its start) and writes through `flow_write`, a compare-and-set
on that epoch. Status fields are `<kind>:<name>` (step, sleep, wait, parallel), each a JSON
record; values go in the meta hash as `v:<name>`, signals as `sig:<name>`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from django_jobs.broker.flows import FlowStore, dumps
from django_jobs.conf import to_seconds
from django_jobs.exceptions import LeaseLost
from django_jobs.flows.errors import Canceled, FlowError, ReplayLost, StepFailed, Suspend
from django_jobs.flows.first import Winner
from django_jobs.flows.history import History
from django_jobs.flows.signals import Signal, SignalOf, signal_name
from django_jobs.flows.steps import Backoff, call_with_timeout, delay_after, refuse_non_json
from django_jobs.message import JobContext

if TYPE_CHECKING:
    from django_jobs.flows.base import Flow

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741

#: Runs of a step before it fails for good, unless the step says otherwise.
DEFAULT_STEP_ATTEMPTS = 3


class Context:
    """What a flow's run knows and does; see the Flows guide (docs/flows.rst)."""

    def __init__(
        self,
        store: FlowStore,
        call_id: str,
        flow: str,
        epoch: str,
        meta: dict[str, str],
        status: dict[str, str],
        event: JobContext | None = None,
    ) -> None:
        self.store = store
        self.call_id = call_id
        self.flow = flow
        self.epoch = epoch
        self._meta = meta
        self._status = status
        self._event = event
        self.metadata: dict[str, Any] = json.loads(meta.get("metadata") or "{}")
        self._seen: set[str] = set()
        self.history = History(flow, call_id, status)
        #: The version of the flow's code this run was started under (Flow.version).
        self.run_version = int(meta["version"]) if meta.get("version", "").isdigit() else 1
        self._nows = 0
        self._marked = False
        #: Records that any later replay would derive again the same way (a sleep past its
        #: wake time is done; a wait whose signal is here is received): sent with this
        #: replay's next write, so a memoised replay costs its acquire and one write.
        self._derived: dict[str, dict[str, Any]] = {}
        #: When this replay started, and when it should hand over to a fresh event: half-way
        #: to its event's timeout, so that a flow of many long steps is never cut short.
        self.began = time.time()
        self.budget = (event.deadline - self.began) / 2 if event is not None else None

    # -- bookkeeping ------------------------------------------------------------------------

    def _name(self, name: str, kind: str) -> None:
        """Take a step name (unique in a run) and its position (history.py:
        NonDeterministicFlow when the history has another record there)."""
        if not isinstance(name, str) or not name:
            raise FlowError(f"a step name must be a non-empty str, got {name!r}")
        if name in self._seen:
            raise FlowError(
                f"step name {name!r} is used twice in one run of {self.flow}: give each step, "
                f"sleep, wait and parallel its own name (in a loop: f'charge-{{i}}')"
            )
        self._seen.add(name)
        self.history.claim(f"{kind}:{name}")

    def _record(self, field: str) -> dict[str, Any]:
        raw = self._status.get(field)
        return json.loads(raw) if raw else {}

    def write(
        self,
        mode: str = "keep",
        *,
        status: dict[str, dict[str, Any]] | None = None,
        meta: dict[str, str] | None = None,
        unless_signal: str = "",
    ) -> str:
        """Write under this replay's epoch; raise ReplayLost or Canceled when refused; return
        "ok" or "signaled"."""
        records = {**self._derived, **(status or {})}
        for field, record in records.items():
            if "seq" not in record and field in self.history.asked:
                record["seq"] = self.history.asked[field]
        encoded = {field: dumps(record) for field, record in records.items()}
        task = None
        if mode == "keep" and not self._marked and self._event is not None:
            task = (self._event.queue, self._event.job_id)  # for the heartbeat's renewals
            self._marked = True
        answer = self.store.write(
            self.call_id, self.epoch, mode, status=encoded, meta=meta,
            unless_signal=unless_signal, task=task,
            retention=self.store.settings.flow_retention,
        )  # fmt: skip
        if answer == "lost":
            raise ReplayLost()
        if answer == "canceled":
            raise Canceled()
        if answer == "ok":
            self._derived.clear()
            self._status.update(encoded)
            self._meta.update(meta or {})
        return answer

    def over_budget(self) -> bool:
        """Whether this replay has spent half its event's time: it hands over at the next
        recorded step."""
        return self.budget is not None and time.time() - self.began > self.budget

    def suspend(
        self, status: dict[str, dict[str, Any]], run_status: str, wake_at: float | None
    ) -> Suspend:
        """Record why the run stops here, release the call, and return what to raise."""
        self.write("release", status=status, meta={"status": run_status})
        return Suspend(wake_at)

    # -- what flows call --------------------------------------------------------------------

    def now(self) -> float:
        """The time (epoch seconds), memoised: the same on every replay of this point."""
        self._nows += 1
        field = f"v:now#{self._nows}"
        if field not in self._meta:
            self.write(meta={field: repr(time.time())})
        return float(self._meta[field])

    def step(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        max_attempts: int = DEFAULT_STEP_ATTEMPTS,
        timeout: timedelta | float | None = None,
        backoff: Backoff = None,
        atomic: bool = False,
        **kwargs: Any,
    ) -> T:
        """Run fn(*args, **kwargs) once for this call and return its value; on every later
        replay return the memoised value. A failure is retried after `backoff` (seconds, or
        a function of the failures so far) up to `max_attempts` runs, then raises StepFailed
        here (and on every later replay). The value must survive JSON.

        atomic: run fn inside one database transaction with the step's completion record (a
        ProcessedTask row holding its value), so that its ORM writes happen once even when
        the worker dies between that commit and the Redis write (atomic.py)."""
        self._name(name, "step")
        field = f"step:{name}"
        rec = self._record(field)
        state = rec.get("state")
        if state == "done":
            value: T = json.loads(self._meta[f"v:{name}"])
            return value
        if state == "failed":
            raise StepFailed(name, rec.get("error", ""))
        now = time.time()
        if state == "retrying" and rec.get("next_at", 0) > now:
            raise self.suspend({}, "sleeping", rec["next_at"])
        committed = None
        if atomic:
            from django_jobs.flows.atomic import committed_value

            committed = committed_value(self, name)
        if committed is None and state == "running" and rec.get("epoch") != self.epoch:
            rec["crashes"] = rec.get("crashes", 0) + 1  # its replay's worker died in it
            budget = self.store.settings.max_crashes
            if rec["crashes"] >= budget:
                rec.update(state="failed", finished_at=now,
                           error=f"crashed its worker {rec['crashes']} times")  # fmt: skip
                self.write(status={field: rec})
                raise StepFailed(name, rec["error"])
        if committed is None:
            rec.update(state="running", epoch=self.epoch, started_at=now,
                       attempts=rec.get("attempts", 0) + 1)  # fmt: skip
            rec.pop("next_at", None)
            self.write(status={field: rec})
        seconds = None if timeout is None else to_seconds(timeout)
        try:
            if committed is not None:
                value = committed[0]  # its transaction committed: Redis never heard of it
            elif atomic:
                from django_jobs.flows.atomic import run_atomic

                value = call_with_timeout(seconds, run_atomic, self, name, fn, args, kwargs)
            else:
                value = call_with_timeout(seconds, fn, *args, **kwargs)
        except (LeaseLost, Suspend, ReplayLost, Canceled):
            raise
        except Exception as exc:
            self._failed(name, field, rec, exc, max_attempts, backoff)
        problem = refuse_non_json(value)
        rec["finished_at"] = time.time()
        if problem:
            rec.update(state="failed", error=f"its value {problem}")
            self.write(status={field: rec})
            raise StepFailed(name, rec["error"])
        rec.update(state="done")
        rec.pop("error", None)
        self.write(status={field: rec}, meta={f"v:{name}": dumps(value)})
        if self.over_budget():
            raise self.suspend({}, "running", time.time())  # go on in a fresh event
        return value

    def _failed(
        self,
        name: str,
        field: str,
        rec: dict[str, Any],
        exc: Exception,
        max_attempts: int,
        backoff: Backoff,
    ) -> NoReturn:
        failures = rec.get("failures", 0) + 1
        rec.update(failures=failures, finished_at=time.time(),
                   error=f"{type(exc).__name__}: {exc}"[:1000])  # fmt: skip
        if failures >= max_attempts:
            rec["state"] = "failed"
            self.write(status={field: rec})
            raise StepFailed(name, rec["error"]) from exc
        rec.update(state="retrying", next_at=time.time() + delay_after(backoff, failures))
        raise self.suspend({field: rec}, "sleeping", rec["next_at"])

    def sleep(self, name: str, duration: timedelta | float) -> None:
        """Suspend the run for duration (a timer in the scheduled set, no process waits)."""
        self._sleep(name, lambda: time.time() + to_seconds(duration))

    def sleep_until(self, name: str, when: datetime | float) -> None:
        """Suspend the run until `when` (an aware datetime, or epoch seconds)."""
        if isinstance(when, datetime):
            if when.tzinfo is None:
                raise ValueError("sleep_until needs a timezone-aware datetime")
            at = when.timestamp()
        else:
            at = float(when)
        self._sleep(name, lambda: at)

    def _sleep(self, name: str, until: Callable[[], float]) -> None:
        self._name(name, "sleep")
        field = f"sleep:{name}"
        rec = self._record(field)
        if rec.get("state") == "done":
            return
        now = time.time()
        if not rec:
            rec = {"state": "sleeping", "started_at": now, "wake_at": until()}
            if rec["wake_at"] > now:
                raise self.suspend({field: rec}, "sleeping", rec["wake_at"])
        if rec["wake_at"] > now:  # an early event: sleep on
            raise self.suspend({}, "sleeping", rec["wake_at"])
        rec.update(state="done", finished_at=now)
        self._derived[field] = rec

    @overload
    def wait_for_signal(
        self, name: SignalOf[T], timeout: timedelta | float | None = None
    ) -> tuple[T | None, bool]: ...

    @overload
    def wait_for_signal(
        self, name: str, timeout: timedelta | float | None = None
    ) -> tuple[Any, bool]: ...

    def wait_for_signal(
        self, name: str | SignalOf[Any], timeout: timedelta | float | None = None
    ) -> tuple[Any, bool]:
        """Wait for the signal `name` (send_signal; a str, or a Signal declared on the flow,
        typing the value); return (value, True), or (None, False) once `timeout` has passed
        without it. A signal sent before the wait is kept for it."""
        name = name if isinstance(name, str) else name.name  # "" is refused by _name
        self._name(name, "wait")
        return self._wait(name, timeout)

    def _wait(self, name: str, timeout: timedelta | float | None) -> tuple[Any, bool]:
        """wait_for_signal's body (a child's end is a signal its parent waits for so, too)."""
        field, sig = f"wait:{name}", f"sig:{name}"
        rec = self._record(field)
        if rec.get("state") == "received":
            return json.loads(self._meta[sig]), True
        if rec.get("state") == "timed_out":
            return None, False
        now = time.time()
        if not rec:
            rec = {"state": "waiting", "started_at": now}
            if timeout is not None:
                rec["deadline"] = now + to_seconds(timeout)
        if sig not in self._meta:
            deadline = rec.get("deadline")
            if deadline is None or deadline > now:
                answer = self.write("release", status={field: rec},
                                    meta={"status": "waiting"}, unless_signal=sig)  # fmt: skip
                if answer == "ok":
                    raise Suspend(deadline)
            else:
                rec.update(state="timed_out", finished_at=now)
                if self.write(status={field: rec}, unless_signal=sig) == "ok":
                    return None, False
            self._reload(sig)  # it arrived meanwhile
        rec.update(state="received", finished_at=time.time())
        self._derived[field] = rec  # signals are never taken back: derived again the same
        return json.loads(self._meta[sig]), True

    def _reload(self, field: str) -> None:
        (state,) = self.store.read([self.call_id])
        if state is None or field not in state.meta:
            raise ReplayLost()
        self._meta[field] = state.meta[field]

    def parallel(
        self,
        name: str,
        calls: Sequence[Callable[[], Any] | tuple[Any, ...]],
        limit: int = 4,
        *,
        max_attempts: int = DEFAULT_STEP_ATTEMPTS,
        backoff: Backoff = None,
    ) -> list[Any]:
        """Run each call (a function of no arguments, or a (function, arg, ...) tuple) as a
        step of its own, at most `limit` at once; return their values in order. See
        parallel.py."""
        from django_jobs.flows.parallel import run_parallel

        self._name(name, "parallel")
        return run_parallel(self, name, calls, limit, max_attempts, backoff)

    def version(self, name: str, latest: int) -> int:
        """A versioning gate: the version of this change that this run takes, recorded once per
        run. A run meeting the gate for the first time takes `latest`; a run whose history
        went past this point before the gate was in the code takes the version it was started
        under (Flow.version then: 1 by default), so that it keeps its old path. The gate takes
        no position among the steps, and may be asked again anywhere in the run (the same
        answer). See docs/flows.rst, Versioning."""
        from django_jobs.flows.history import gate

        return gate(self, name, latest)

    def first_of(
        self,
        name: str,
        *signals: str | Signal[Any] | Sequence[str | Signal[Any]],
        timeout: timedelta | float | None = None,
    ) -> Winner:
        """Wait for whichever comes first of several signals (names or Signals, or one list of
        them) or the end of `timeout` (a sleep): Winner(signal name, its value), or
        Winner(None, None) when the time came first. Settled by one script: a signal that
        comes after the winner (the time or another signal) is refused (send_signal answers
        False). See first.py."""
        from django_jobs.flows.first import first_of

        names: list[str] = []
        for item in signals:
            items = [item] if isinstance(item, (str, Signal)) else list(item)
            names += [signal_name(i) for i in items]
        self._name(name, "first")
        return first_of(self, name, names, timeout)

    def start_child(
        self,
        flow: type[Flow[I, O]],
        input: I,
        *,
        name: str | None = None,
        wait: bool = True,
    ) -> Any:
        """Start a child run of `flow` with `input`, once for this call: with wait=True (the
        default), wait for it to end and return its output (StepFailed if it failed or was
        canceled); with wait=False, return its call id at once. Its call id is
        "<this call id>.<name>" (name: the flow's name by default). Canceling this run
        cancels its children. See children.py."""
        from django_jobs.flows.children import start_child

        name = name or flow.name
        self._name(name, "child")
        return start_child(self, flow, input, name, wait)
