"""`manage.py flows check`: the replay rule's static lint (django_jobs.flows.lint)."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_jobs.flows.lint import check_paths, check_source

FIXTURES = Path(__file__).parent / "flow_lint_fixtures"
DIRTY = FIXTURES / "dirty.py"
CLEAN = FIXTURES / "clean.py"


def expected(path: Path) -> list[tuple[int, str]]:
    """(line, rule) of every line whose comment names the rule the lint must report."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = re.search(r"\)  # (clock|random|uuid|orm|http)$", line)
        if match:
            out.append((number, match.group(1)))
    return out


def test_lint__flags_each_listed_call_with_its_line_and_rule() -> None:
    findings = list(check_paths([DIRTY]))
    want = expected(DIRTY)
    assert len(want) == 14
    assert [(f.line, f.rule) for f in findings] == want
    assert {f.flow for f in findings} == {"Dirty"}
    first = str(findings[0])
    assert first.startswith(f"{DIRTY}:{want[0][0]}:")
    assert "[clock] timezone.now() in Dirty.run outside a step: use ctx.now()" in first


def test_lint__a_clean_flow_with_the_same_calls_in_steps_has_nothing() -> None:
    assert list(check_paths([CLEAN])) == []


def test_lint__helpers_by_name_and_subclass_of_a_flow_of_the_module() -> None:
    source = (
        "import time\nfrom django_jobs.flows import Flow\n"
        "class A(Flow[int]):\n    pass\n"
        "class B(A):\n"
        "    def run(self, c, input):\n"
        "        def body():\n            return time.time()\n"
        "        def other():\n            return time.time()\n"
        "        c.step('body', body)\n"
        "        return other()\n"
    )
    findings = check_source(source, "m.py")
    assert [(f.line, f.rule, f.flow) for f in findings] == [(10, "clock", "B")]


def test_command__exits_1_naming_each_finding_and_0_when_clean() -> None:
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("flows", "check", str(DIRTY), stdout=out, stderr=err)
    assert exited.value.code == 1
    lines = out.getvalue().splitlines()
    assert len(lines) == 14
    assert all(line.startswith(f"{DIRTY}:") for line in lines)
    assert "14 calls outside steps" in err.getvalue()
    out = StringIO()
    call_command("flows", "check", str(CLEAN), stdout=out)
    assert "nothing flagged" in out.getvalue()


def test_command__without_a_subcommand_or_with_a_missing_path_says_what_to_do() -> None:
    with pytest.raises(CommandError, match="flows check"):
        call_command("flows")
    with pytest.raises(CommandError, match="No such file"):
        call_command("flows", "check", "no/such/file.py")


def test_lint__names_without_an_import_and_aliases_are_read_as_usual() -> None:
    source = (
        "import requests as r\nfrom django.utils.timezone import now\n"
        "class F(Flow[int]):\n"
        "    def run(self, ctx, input):\n"
        "        a = datetime.now()\n"
        "        b = now()\n"
        "        c = r.Session().get('x')\n"
        "        return ctx.step('ok', lambda: now())\n"
    )
    assert [(f.line, f.rule) for f in check_source(source)] == [
        (5, "clock"),
        (6, "clock"),
        (7, "http"),
    ]
