"""One result per scenario, and the table the battery prints."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.chaos.checker import Verdict


@dataclass
class Result:
    """What a scenario did and found; it passes when no problem was recorded."""

    scenario: str
    #: What "recovery" measures in this scenario (printed under the table).
    recovery_means: str = ""
    jobs: int = 0
    faults: int = 0
    lost: int = 0
    #: Lost to a fault whose cost is known and documented (a restart without persistence).
    known_lost: int = 0
    #: Dead by the crash budget, every run of them cut short by an injected fault.
    budget: int = 0
    duplicated: int = 0
    #: Two runs of one task at once: none a fault excuses (each is a problem), then excused.
    concurrent: int = 0
    excused: int = 0
    recovery: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems

    def expect(self, condition: object, problem: str) -> bool:
        """Record a problem unless condition holds; return whether it held."""
        if not condition:
            self.problems.append(problem)
        return bool(condition)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def take(self, verdict: Verdict, *, jobs: int) -> None:
        """Count a checker's verdict into this result."""
        self.jobs += jobs
        self.lost += len(verdict.lost) + len(verdict.not_completed)
        self.budget += len(verdict.budget)
        self.duplicated += len(verdict.duplicated)
        self.concurrent += len(verdict.concurrent)
        self.excused += len(verdict.excused)
        self.problems += verdict.problems


def seconds(value: float) -> str:
    """A duration for the table: milliseconds below one second."""
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _seconds(values: Sequence[float], which: str) -> str:
    if not values:
        return "-"
    return seconds(statistics.median(values) if which == "p50" else max(values))


def _lost(r: Result) -> str:
    """Lost, then what known costs took apart from it."""
    extra = []
    if r.known_lost:
        extra.append(f"+{r.known_lost} known")
    if r.budget:
        extra.append(f"+{r.budget} budget")
    return f"{r.lost} ({', '.join(extra)})" if extra else str(r.lost)


def _concurrent(r: Result) -> str:
    """Concurrent double runs, then those a fault excused."""
    return f"{r.concurrent} (+{r.excused} excused)" if r.excused else str(r.concurrent)


COLUMNS = (
    "scenario",
    "jobs",
    "faults",
    "lost",
    "dup",
    "concurrent",
    "recovery p50",
    "recovery max",
    "result",
)


def table(results: Sequence[Result]) -> str:
    """The results as a fixed-width table, then the notes of each scenario."""
    rows = [COLUMNS] + [
        (
            r.scenario,
            str(r.jobs),
            str(r.faults),
            _lost(r),
            str(r.duplicated),
            _concurrent(r),
            _seconds(r.recovery, "p50"),
            _seconds(r.recovery, "max"),
            f"{'pass' if r.passed else 'FAIL'} ({r.seconds:.0f}s)",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    for r in results:
        lines.append(f"{r.scenario}: recovery = {r.recovery_means or '-'}")
        lines += [f"    {note}" for note in r.notes]
        lines += [f"    FAIL: {problem}" for problem in r.problems]
    return "\n".join(lines)
