"""The chaos battery's "no concurrent double run" rule (tests/chaos/checker.py), on written logs."""

from __future__ import annotations

import math
from pathlib import Path

from tests.chaos.checker import Fault, Ledger, Log, check, concurrent, spans

T0 = 1_000_000.0


def write(directory: Path, *lines: str) -> Log:
    """Write Chaos log lines ("<event> <job> <pid> <seconds after T0> <worker>"), one file per
    pid as the job does, and read them."""
    for line in lines:
        event, job, pid, at, worker = line.split()
        with (directory / f"{pid}.log").open("a") as f:
            f.write(f"{event} {job} 0 1 {pid} {T0 + float(at):.6f} {worker}\n")
    return Log(directory).read()


def redis_fault(start: float, lifted: float, end: float, overlap: float = 3.0) -> Fault:
    return Fault("SIGSTOP Redis", T0 + start, T0 + end, frozenset(), 4, T0 + lifted, overlap)


def test_concurrent__one_worker_is_a_failure_even_under_a_fault(tmp_path: Path) -> None:
    log = write(
        tmp_path,
        "start a 1 0 w0",
        "start a 2 6 w0",
        "abort a 1 6.004 w0",
        "done a 2 16 w0",
    )
    failures, excused = concurrent(log, [redis_fault(0.5, 5.5, 20)])
    assert len(failures) == 1
    assert not excused
    assert "both on w0" in failures[0]
    assert "4.0ms" in failures[0]


def test_concurrent__two_workers_within_the_allowance_are_excused(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start a 2 6 w1", "abort a 1 7 w0", "done a 2 16 w1")
    failures, excused = concurrent(log, [redis_fault(0.5, 5.5, 20)])
    assert not failures
    assert len(excused) == 1


def test_concurrent__two_workers_past_the_allowance_fail(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start a 2 6 w1", "done a 1 10 w0", "done a 2 16 w1")
    failures, excused = concurrent(log, [redis_fault(0.5, 5.5, 20)])
    assert len(failures) == 1
    assert not excused


def test_concurrent__two_workers_with_no_fault_fail(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start a 2 1 w1", "done a 1 2 w0", "done a 2 3 w1")
    failures, _ = concurrent(log, [])
    assert len(failures) == 1
    assert "on two workers" in failures[0]


def test_concurrent__runs_in_a_row_are_not_concurrent(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "done a 1 1 w0", "start a 2 1.5 w0", "done a 2 2 w0")
    assert concurrent(log, []) == ([], [])


def test_spans__a_killed_run_ends_at_the_kill(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start a 2 4 w1", "done a 2 5 w1")
    kill = Fault("kill -9 worker", T0 + 1, T0 + 1, frozenset({1}), 1)
    (first, _second) = sorted(spans(log, [kill])["a"], key=lambda s: s.start.time)
    assert first.end == T0 + 1
    assert first.how == "hit by kill -9 worker"
    assert concurrent(log, [kill]) == ([], [])


def test_spans__a_start_written_as_the_kill_was_sent_ends_there(tmp_path: Path) -> None:
    # The kill is dated before os.kill: the child wrote "start" in between, then died
    log = write(tmp_path, "start a 1 1.00001 w0", "start a 2 1.01 w0", "done a 2 1.02 w0")
    kill = Fault("kill -9 child", T0 + 1, T0 + 1, frozenset({1}), 1)
    (first, _second) = sorted(spans(log, [kill])["a"], key=lambda s: s.start.time)
    assert first.end == first.start.time
    assert concurrent(log, [kill]) == ([], [])


def test_spans__a_run_with_no_end_never_ended(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start a 2 4 w1", "done a 2 5 w1")
    (first, _second) = sorted(spans(log, [])["a"], key=lambda s: s.start.time)
    assert math.isinf(first.end)
    assert first.how == "never ended"
    (failure,) = concurrent(log, [])[0]
    assert "the first run has no end in the log" in failure


def test_spans__the_process_next_line_ends_a_run(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start b 1 2 w0", "done b 1 3 w0")
    (run,) = spans(log, [])["a"]
    assert run.end == T0 + 2
    assert run.how == "next"


def test_check__a_concurrent_double_run_is_a_problem(tmp_path: Path) -> None:
    log = write(tmp_path, "start a 1 0 w0", "start a 2 1 w0", "done a 1 2 w0", "done a 2 3 w0")
    ledger = Ledger()
    ledger.accept("a", 0, "default", T0, T0)
    verdict = check(ledger, log, [])
    assert len(verdict.concurrent) == 1
    assert any("concurrent double run" in problem for problem in verdict.problems)
