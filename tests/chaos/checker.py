"""The checker: what the jobs logged against what enqueue accepted and the faults injected.

The Chaos job writes `<event> <job id> <n> <attempt> <pid> <time> <worker>` lines, "start"
before its work and "done" after it ("abort" or "crash" when a run is cut short), to
`<log dir>/<pid>.log`. A job id with no "done" line was lost; one with two or more ran to
completion more than once, which only a fault may explain.

No concurrent double run: two runs of one task that overlap in time are a failure on one
worker, always (its supervisor must never run a task in two of its slots), and on two workers
unless a fault the battery injected took the earlier run's lease away (it froze or killed that
run's worker, or froze Redis) while the later one started, and the two ran together no longer
than the fault's `overlap` after it was lifted: the time the stale worker needs to learn that
the task is no longer its own (a heartbeat) and interrupt the run (the timeout grace).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Execution:
    """One line of the log."""

    event: str
    job_id: str
    n: int
    attempt: int
    pid: int
    time: float
    #: The worker the process belongs to ($CHAOS_WORKER of `runworker`), "-" if unknown.
    worker: str = "-"


class Log:
    """Every process's log in one directory, read incrementally (files only ever grow)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.starts: dict[str, list[Execution]] = defaultdict(list)
        self.dones: dict[str, list[Execution]] = defaultdict(list)
        self.by_pid: dict[int, list[Execution]] = defaultdict(list)
        self.lines = 0

    def read(self) -> Log:
        """Take in what was appended since the last read."""
        for path in sorted(self.directory.glob("*.log")):
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = self.partial.pop(path, b"") + f.read()
                self.offsets[path] = f.tell()
            *lines, rest = data.split(b"\n")
            if rest:
                self.partial[path] = rest  # a line still being written
            for line in lines:
                self._add(line.decode())
        return self

    def _add(self, line: str) -> None:
        event, job_id, n, attempt, pid, at, *worker = line.split()
        execution = Execution(event, job_id, int(n), int(attempt), int(pid), float(at), *worker[:1])
        if event in ("start", "done"):
            (self.starts if event == "start" else self.dones)[job_id].append(execution)
        self.by_pid[execution.pid].append(execution)
        self.lines += 1

    def done_ids(self) -> set[str]:
        return set(self.dones)

    def started(self, job_id: str) -> list[Execution]:
        """The job's "start" lines so far (empty if none)."""
        return self.starts.get(job_id, [])

    def finished(self, job_id: str) -> list[Execution]:
        """The job's "done" lines so far (empty if none)."""
        return self.dones.get(job_id, [])

    def first_start_after(self, job_id: str, when: float) -> float | None:
        times = [e.time for e in self.starts.get(job_id, ()) if e.time > when]
        return min(times, default=None)

    def running_at(self, pid: int, when: float) -> str | None:
        """The job a process had started and not finished at a time, if any."""
        current: str | None = None
        for execution in self.by_pid.get(pid, ()):
            if execution.time > when:
                break
            current = execution.job_id if execution.event == "start" else None
        return current


@dataclass(frozen=True, slots=True)
class Accepted:
    n: int
    queue: str
    #: time.time() when enqueue was called, and when it returned.
    sent: float
    at: float


@dataclass
class Ledger:
    """What enqueue accepted (by job id), and the numbers of enqueues that raised."""

    accepted: dict[str, Accepted] = field(default_factory=dict)
    #: Numbers whose enqueue raised BrokerUnavailable: they may or may not have been applied.
    uncertain: set[int] = field(default_factory=set)
    #: Accepted ids meant to end dead (poison): never "lost", never allowed to be done.
    expect_dead: set[str] = field(default_factory=set)
    #: Accepted ids a known-cost fault may take away (a Redis restart without persistence).
    may_lose: set[str] = field(default_factory=set)
    _counter: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_n(self) -> int:
        with self._lock:
            return next(self._counter)

    def accept(self, job_id: str, n: int, queue: str, sent: float, at: float) -> None:
        with self._lock:
            self.accepted[job_id] = Accepted(n, queue, sent, at)

    def expected(self) -> set[str]:
        """Accepted ids that must run to completion."""
        with self._lock:
            return set(self.accepted) - self.expect_dead - self.may_lose


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault the battery injected, and how many duplicates it can explain.

    A "done" line is blamed on the fault if it was written by one of its processes no later than
    `end` (a kill, a freeze), or, for a fault without processes (Redis), between `start` and
    `end` (the scenario widens the window by how long a task caught in it may still run).
    """

    kind: str
    start: float
    end: float
    pids: frozenset[int]
    #: The most duplicates it can cause (the tasks it could catch between "done" and ack).
    cap: int
    #: When it was lifted (Redis or a worker thawed), if later than `start`.
    lifted: float | None = None
    #: Seconds two runs of one task on two workers may overlap after it was lifted (0: none).
    overlap: float = 0.0

    def blames(self, execution: Execution) -> bool:
        if self.pids:
            return execution.pid in self.pids and execution.time <= self.end
        return self.start <= execution.time <= self.end

    def excuses(self, earlier: Execution, later: float, until: float) -> bool:
        """Whether it explains runs on two workers at once: it hit the earlier run's process
        (or Redis), the later run started (at `later`) while it lasted, and the two ran together
        (until `until`) no longer than `overlap` past its lift."""
        if self.pids and earlier.pid not in self.pids:
            return False
        lifted = self.start if self.lifted is None else self.lifted
        return self.start <= later <= self.end and until - max(later, lifted) <= self.overlap


@dataclass(frozen=True, slots=True)
class Span:
    """One run of a task, from its "start" line to its end as far as the log tells."""

    start: Execution
    #: When it ended: its own "done", "abort" or "crash" line; the process's next line (a child
    #: runs one task at a time); the end of a fault that hit its process; else never (inf).
    end: float
    #: Which of those: the event, "next", "hit by <fault kind>" or "never ended".
    how: str


def spans(log: Log, faults: Iterable[Fault]) -> dict[str, list[Span]]:
    """Every run of every task in the log, by job id."""
    faults = list(faults)
    runs: dict[str, list[Span]] = defaultdict(list)
    for pid, lines in log.by_pid.items():
        for index, line in enumerate(lines):
            if line.event != "start":
                continue
            if index + 1 < len(lines):
                after = lines[index + 1]
                own = after.job_id == line.job_id and after.event != "start"
                span = Span(line, after.time, after.event if own else "next")
            else:
                span = _last_span(line, [f for f in faults if pid in f.pids])
            runs[line.job_id].append(span)
    return runs


def _last_span(line: Execution, hits: list[Fault]) -> Span:
    """The span of a process's last line, a "start": it ended when a fault hit the process.

    A kill is dated just before it is sent, so a process may write a "start" between that time
    and its death: if every fault on it is dated before the line, the last one killed it then.
    """
    later = [f for f in hits if f.end >= line.time]
    if later:
        first = min(later, key=lambda f: f.end)
        return Span(line, first.end, f"hit by {first.kind}")
    if hits:
        return Span(line, line.time, f"hit by {hits[-1].kind} as it started")
    return Span(line, math.inf, "never ended")


def _describe(a: Span, b: Span, until: float) -> str:
    where = f"both on {a.start.worker}" if a.start.worker == b.start.worker else "on two workers"
    both = until - b.start.time
    length = (
        "with no end in the log"
        if math.isinf(until)
        else f"for {both * 1000:.1f}ms"
        if both < 1
        else f"for {both:.2f}s"
    )
    return (
        f"{a.start.job_id} ran twice at once {where} (pids {a.start.pid}, {b.start.pid}) "
        f"{length}; the first run {_ended(a)}"
    )


def _ended(span: Span) -> str:
    if span.how in ("done", "abort", "crash"):
        return f"ended with its {span.how!r} line"
    if span.how == "next":
        return "ended at its process's next line"
    if math.isinf(span.end):
        return "has no end in the log"
    return f"ended when {span.how}"


def concurrent(log: Log, faults: Iterable[Fault]) -> tuple[list[str], list[str]]:
    """Two runs of one task at once: (those no fault excuses, those a fault excuses)."""
    faults = list(faults)
    failures: list[str] = []
    excused: list[str] = []
    for runs in spans(log, faults).values():
        runs.sort(key=lambda span: span.start.time)
        for i, a in enumerate(runs):
            for b in runs[i + 1 :]:
                if b.start.time >= a.end:
                    continue
                until = min(a.end, b.end)
                text = _describe(a, b, until)
                if a.start.worker != b.start.worker and any(
                    f.excuses(a.start, b.start.time, until) for f in faults
                ):
                    excused.append(text)
                else:
                    failures.append(text)
    return failures, excused


@dataclass
class Verdict:
    lost: list[str]
    #: Dead by the crash budget ("crashed its worker"), every run of it cut short by a fault
    #: the battery injected: what MAX_CRASHES costs under that many kills, not a loss.
    budget: list[str]
    #: Accepted and done, but whose record in Redis is not "completed" (id -> state).
    not_completed: dict[str, str | None]
    duplicated: dict[str, list[Execution]]
    unexpected: list[str]
    #: Duplicates no injected fault explains.
    untraced: list[str]
    #: The most duplicates the faults can explain.
    cap: int
    #: Poison tasks that ran to completion.
    revived: list[str]
    #: Two runs of one task at once that no fault excuses, and those a fault excuses.
    concurrent: list[str] = field(default_factory=list)
    excused: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} lost, e.g. {self.lost[:3]}")
        if self.not_completed:
            sample = list(self.not_completed.items())[:3]
            found.append(f"{len(self.not_completed)} done but not completed in Redis: {sample}")
        if self.unexpected:
            found.append(f"{len(self.unexpected)} unexpected, e.g. {self.unexpected[:3]}")
        if self.untraced:
            found.append(f"{len(self.untraced)} duplicates no fault explains: {self.untraced[:3]}")
        if len(self.duplicated) > self.cap:
            found.append(f"{len(self.duplicated)} duplicates, more than the faults' {self.cap}")
        if self.revived:
            found.append(f"{len(self.revived)} poison tasks completed: {self.revived[:3]}")
        if self.concurrent:
            found.append(
                f"{len(self.concurrent)} concurrent double run(s): "
                + "; ".join(self.concurrent[:3])
            )
        return found


def _cut_short(log: Log, job_id: str, faults: list[Fault]) -> bool:
    """Whether every run of the job was in a process a fault hit after the run started."""
    runs = log.started(job_id)
    return bool(runs) and all(
        any(run.pid in f.pids and run.time <= f.end for f in faults) for run in runs
    )


def check(
    ledger: Ledger,
    log: Log,
    faults: Iterable[Fault],
    states: Mapping[str, tuple[str | None, str | None]] | None = None,
) -> Verdict:
    """Compare the log with the ledger; states (id -> Redis state and error) adds the check
    that what ran is completed, and tells deaths by the crash budget from losses."""
    faults = list(faults)
    expected = ledger.expected()
    done = log.done_ids()
    lost = sorted(expected - done)
    budget = [
        i
        for i in lost
        if states is not None
        and states.get(i, (None, None))[0] == "dead"
        and "crashed its worker" in (states[i][1] or "")
        and _cut_short(log, i, faults)
    ]
    lost = [i for i in lost if i not in budget]
    not_completed = {}
    if states is not None:
        not_completed = {
            i: states.get(i, (None, None))[0]
            for i in sorted(expected & done)
            if states.get(i, (None, None))[0] != "completed"
        }
    duplicated = {i: runs for i, runs in log.dones.items() if len(runs) > 1}
    unexpected = sorted(
        i
        for i, runs in log.dones.items()
        if i not in ledger.accepted and runs[0].n not in ledger.uncertain
    )
    untraced = sorted(
        i
        for i, runs in duplicated.items()
        if not any(f.blames(run) for run in runs for f in faults)
    )
    overlapping, excused = concurrent(log, faults)
    return Verdict(
        lost=lost,
        budget=budget,
        not_completed=not_completed,
        duplicated=duplicated,
        unexpected=unexpected,
        untraced=untraced,
        cap=sum(f.cap for f in faults),
        revived=sorted(ledger.expect_dead & done),
        concurrent=overlapping,
        excused=excused,
    )
