"""Helpers the scenarios share: checking a drained stage, timing recoveries, a steady feeder."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable

from django_jobs.exceptions import BrokerUnavailable, JobsError
from testproject.probes.jobs import ChaosWork
from tests.chaos.checker import Fault, Log, check
from tests.chaos.harness import Stage
from tests.chaos.processes import ChaosError, wait_until
from tests.chaos.report import Result, seconds


def conclude(
    stage: Stage, result: Result, *, drain: float | None = None, states: bool = True
) -> None:
    """Drain (if given a timeout), check the log against the ledger and faults, count it in.

    A drain that times out is a problem, and the check still runs: it says what was lost.
    """
    if drain is not None:
        try:
            stage.drain(timeout=drain)
        except ChaosError as exc:
            result.problems.append(str(exc))
    stage.log.read()
    verdict = check(stage.ledger, stage.log, stage.faults, stage.states() if states else None)
    result.take(verdict, jobs=len(stage.ledger.accepted))
    result.faults += len(stage.faults)
    if verdict.budget:
        result.note(
            f'{len(verdict.budget)} task(s) dead by the crash budget ("crashed its worker"), '
            f"every run cut short by an injected kill: the known cost of MAX_CRASHES"
        )
    if verdict.duplicated:
        result.note(
            f"{len(verdict.duplicated)} duplicate(s), each traced to an injected fault "
            f"(the faults could explain up to {verdict.cap})"
            if not verdict.untraced
            else f"{len(verdict.duplicated)} duplicate(s), {len(verdict.untraced)} untraced"
        )
    if verdict.excused:
        result.note(
            f"{len(verdict.excused)} pair(s) of runs of one task at once on two workers, each "
            f"after an injected fault took the first run's lease, within its allowance: "
            + "; ".join(verdict.excused[:2])
        )


def primary_lost(
    stage: Stage, kind: str, killed: float, window: float, aftermath: float, slots: int
) -> None:
    """Record the loss of a Redis primary at `killed`: a run finished in the `window` before it
    may have lost its ack with it and run again, and so may a run of one of the `slots` busy
    then; a duplicate is blamed on it until `aftermath` after."""
    finished = stage.log.read().dones.values()
    caught = sum(1 for runs in finished if killed - window <= runs[0].time <= killed)
    stage.fault(kind, killed - window, killed + aftermath, cap=caught + slots)


def orphan_recoveries(log: Log, faults: Iterable[Fault]) -> dict[str, list[float]]:
    """For each task a kill or freeze caught mid-run: seconds until it started again, by kind."""
    log.read()
    times: dict[str, list[float]] = {}
    for fault in faults:
        for pid in fault.pids:
            job_id = log.running_at(pid, fault.start)
            if job_id is None:
                continue
            again = log.first_start_after(job_id, fault.start)
            if again is not None:
                times.setdefault(fault.kind, []).append(again - fault.start)
    return times


def probe(stage: Stage, since: float, timeout: float = 40) -> float:
    """Enqueue a job as soon as Redis takes one, wait until it has run: seconds since `since`."""

    def enqueue() -> list[str]:
        try:
            return stage.enqueue(1)
        except BrokerUnavailable:
            return []

    (job_id,) = wait_until(enqueue, timeout, "an enqueue accepted after the fault", 0.1)
    runs = wait_until(lambda: stage.log.read().finished(job_id), timeout, "the probe job done")
    return runs[0].time - since


def spread(values: list[float]) -> str:
    """p50 and max of some seconds, for a note."""
    if not values:
        return "-"
    return f"p50 {seconds(statistics.median(values))}, max {seconds(max(values))}"


class Feeder:
    """Enqueue jobs at a steady rate from a thread, counting enqueues that raised.

    BrokerUnavailable is counted and the feeding goes on; any other error stops it (and is raised
    when it is left), unless `keep_going`: then errors that are not django_jobs' own are kept in
    `unnamed` (a raw redis error, say, where a named one was due) and the feeding goes on.
    """

    def __init__(
        self,
        stage: Stage,
        per_second: float,
        make: Callable[[int], ChaosWork],
        batch: int = 5,
        keep_going: bool = False,
        **options: object,
    ) -> None:
        self.stage = stage
        self.interval = batch / per_second
        self.batch = batch
        self.make = make
        self.options = options
        self.failures = 0
        #: The first messages of the BrokerUnavailable errors enqueue raised.
        self.refusals: list[str] = []
        #: Errors that are not django_jobs' own, when told to keep going past them.
        self.unnamed: list[BaseException] = []
        self.keep_going = keep_going
        #: An unexpected error that stopped the feeder, raised again when it is left.
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._feed, name="feeder", daemon=True)

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        if self.error is not None:
            raise ChaosError(f"the feeder stopped: {self.error!r}") from self.error

    def _feed(self) -> None:
        next_at = time.monotonic()
        while not self.stopping.is_set():
            try:
                self.stage.enqueue(self.batch, self.make, **self.options)
            except BrokerUnavailable as exc:
                self.failures += 1
                if len(self.refusals) < 3:
                    self.refusals.append(str(exc))
            except Exception as exc:
                if not self.keep_going or isinstance(exc, JobsError):
                    self.error = exc
                    return
                self.unnamed.append(exc)
            except BaseException as exc:
                self.error = exc
                return
            next_at += self.interval
            # Pacing a steady rate, not waiting for a condition; catch up after a stall.
            self.stopping.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - self.interval)
