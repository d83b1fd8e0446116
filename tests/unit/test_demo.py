"""The demo's start-up text (testproject/demo.py): what a second terminal types to reach it."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from testproject import demo


def test_second_terminal__exports_the_redis_url_the_demo_uses(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    text = demo.second_terminal("redis://127.0.0.1:6379/0", "8001")

    assert "http://127.0.0.1:8001/" in text
    lines = [line.strip() for line in text.splitlines()]
    assert f"cd {shlex.quote(str(tmp_path))}" in lines
    assert "export REDIS_URL=redis://127.0.0.1:6379/0" in lines
    # The lines run as printed in a shell, and leave REDIS_URL as the demo's.
    script = "\n".join(lines[lines.index(f"cd {shlex.quote(str(tmp_path))}") :][:2])
    shown = subprocess.run(
        ["bash", "-c", f'{script}\necho "$PWD $REDIS_URL"'],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert shown.stdout.split() == [str(tmp_path), "redis://127.0.0.1:6379/0"]


def test_second_terminal__without_redis_unsets_it() -> None:
    text = demo.second_terminal(None, "8000")

    assert "unset REDIS_URL" in text.splitlines()[3]
    assert "export REDIS_URL" not in text
