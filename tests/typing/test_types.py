"""A wrong payload is a mypy error at the enqueue call: run mypy over tests/typing/cases."""

import re
from pathlib import Path

from mypy import api

CASES = Path(__file__).parent / "cases"
ROOT = Path(__file__).resolve().parents[2]


def test_enqueue__mypy_rejects_wrong_payloads(tmp_path: Path) -> None:
    case = CASES / "enqueue.py"
    expected = {
        number: line.split("# E:")[1].strip()
        for number, line in enumerate(case.read_text().splitlines(), start=1)
        if "# E:" in line
    }

    stdout, stderr, _ = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path),
         "--strict", str(case)]
    )  # fmt: skip

    errors: dict[int, str] = {}
    for match in re.finditer(r"^.*?:(\d+): error: (.*)$", stdout, re.MULTILINE):
        errors.setdefault(int(match[1]), "")
        errors[int(match[1])] += match[2]
    assert set(errors) == set(expected), stdout + stderr
    for number, text in expected.items():
        assert text in errors[number], f"line {number}: {errors[number]!r} lacks {text!r}"


def _check(case: Path, tmp_path: Path) -> None:
    """Every line of case marked "# E: text" is a mypy error containing text; no other is."""
    expected = {
        number: line.split("# E:")[1].strip()
        for number, line in enumerate(case.read_text().splitlines(), start=1)
        if "# E:" in line
    }
    stdout, stderr, _ = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path),
         "--strict", str(case)]
    )  # fmt: skip
    errors = {int(m[1]): m[2] for m in re.finditer(r"^.*?:(\d+): error: (.*)$", stdout, re.M)}
    assert set(errors) == set(expected), stdout + stderr
    for number, text in expected.items():
        assert text in errors[number], f"line {number}: {errors[number]!r} lacks {text!r}"


def test_flow_start__mypy_rejects_wrong_inputs(tmp_path: Path) -> None:
    _check(CASES / "flows.py", tmp_path)


def test_async_run__mypy_accepts_def_and_async_def(tmp_path: Path) -> None:
    # A job's run may be sync or async; a wrong return or payload type is still an error.
    _check(CASES / "async_jobs.py", tmp_path)
