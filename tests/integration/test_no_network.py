"""With REDIS_URL unset, no connection is attempted anywhere in the process.

A subprocess runs no_network_probe.py with a sitecustomize (loaded before anything else) that
refuses and records every socket connect and every name lookup. The probe imports the app, runs
the checks, renders every page of the Jobs admin, calls every endpoint of the jobs API,
enqueues in each WHEN_DISABLED mode and starts runworker; the only attempt recorded must be the
one it makes on purpose at the end to show the guard works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

SITECUSTOMIZE = """
import json, os, socket, traceback

_LOG = os.environ["NO_NETWORK_LOG"]


def _refuse(what, address):
    with open(_LOG, "a") as log:
        stack = "".join(traceback.format_stack()[-12:-1])
        log.write(json.dumps({"what": what, "address": repr(address), "stack": stack}) + "\\n")
    raise ConnectionRefusedError(f"no network in this test: {what} {address!r}")


socket.socket.connect = lambda self, address: _refuse("connect", address)
socket.socket.connect_ex = lambda self, address: _refuse("connect_ex", address)
socket.create_connection = lambda address, *a, **k: _refuse("create_connection", address)
socket.getaddrinfo = lambda host, port, *a, **k: _refuse("getaddrinfo", (host, port))
"""


#: A schedule in the settings: with jobs disabled it does not fire, and one log line says so.
SCHEDULE = {"SCHEDULE": {"tick": {"job": "probe.Record", "every": 60, "payload": {"text": "t"}}}}


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[Any]]:
    """The probe's report and the connection attempts recorded while it ran."""
    guard = tmp_path_factory.mktemp("no-network")
    (guard / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = guard / "attempts.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "JOBS_EXTRA")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(guard), str(ROOT)]),
        DATABASE_URL="sqlite:///:memory:",
        NO_NETWORK_LOG=str(log),
        DJANGO_SETTINGS_MODULE="testproject.settings",
        JOBS_EXTRA=json.dumps(SCHEDULE),
    )
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.no_network_probe"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    attempts = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return json.loads(result.stdout), attempts


def test_no_network__nothing_connects_but_the_guard_check(
    probe: tuple[dict[str, Any], list[Any]],
) -> None:
    report, attempts = probe

    assert report["redis_url"] is None
    assert "no network in this test" in report["guard"]
    assert [a["address"] for a in attempts] == ["('127.0.0.1', 6379)"], attempts


def test_no_network__checks_note_the_mode(probe: tuple[dict[str, Any], list[Any]]) -> None:
    report, _ = probe

    assert "django_jobs.I001" in report["checks"]
    assert "Set JOBS['REDIS_URL']" in report["checks"]


def test_no_network__every_admin_page_says_jobs_are_disabled(
    probe: tuple[dict[str, Any], list[Any]],
) -> None:
    report, _ = probe
    pages = report["admin"]

    assert {p["status"] for p in pages if p["path"] in ("/admin/", "/admin/django_jobs/")} == {200}
    jobs = [p for p in pages if "says_disabled" in p]
    assert len({p["path"] for p in jobs}) >= 10
    for page in jobs:
        assert page["status"] < 500, page
        if page["method"] == "get" and page["status"] != 405:  # 405: an action (POST only)
            assert page["status"] == 200, page
            assert page["says_disabled"], page
        # An action's message says so (the tasks list's POST without an action asks for one).
        if page["method"] == "post" and page["path"] != "/admin/django_jobs/task/":
            assert page["says_disabled"], page


def test_no_network__every_api_endpoint_answers_503_jobs_disabled(
    probe: tuple[dict[str, Any], list[Any]],
) -> None:
    report, _ = probe
    *endpoints, schema = report["api"]

    assert schema["status"] == 200
    assert len(endpoints) >= 10
    for endpoint in endpoints:
        assert endpoint["status"] == 503, endpoint
        if endpoint["method"] != "head":
            assert endpoint["body"] == {
                "detail": "Jobs are disabled: JOBS['REDIS_URL'] is not set.",
                "code": "jobs_disabled",
            }, endpoint


def test_no_network__enqueue_follows_when_disabled(
    probe: tuple[dict[str, Any], list[Any]],
) -> None:
    report, _ = probe
    inline, skip, refused = (report["enqueue"][mode] for mode in ("inline", "skip", "raise"))
    warnings = [line for line in report["logs"] if line[0] == "WARNING"]

    # inline: run now, the on-commit one at commit, with the payload checked as for Redis.
    assert inline["state"] == "completed"
    assert inline["deferred_state"] == "completed"
    assert inline["ran_before_commit"] == ["inline"]
    assert inline["ran"] == ["inline", "on commit"]
    assert "JSON cannot encode" in inline["json_error"]
    assert "expected a Note payload, got dict" in inline["type_error"]
    assert "Set REDIS_URL" in inline["refresh"]
    # skip: nothing runs, a warning says so.
    assert skip["state"] == "skipped"
    assert skip["ran"] == inline["ran"]
    assert any(skip["id"] in message and "skipped" in message for _, _, message in warnings)
    # raise: JobsDisabled, which says what to do.
    assert "Set REDIS_URL" in refused


def test_no_network__runworker_explains_and_exits_0(
    probe: tuple[dict[str, Any], list[Any]],
) -> None:
    report, _ = probe

    assert report["runworker_exit"] == 0
    assert "Jobs are disabled" in report["runworker"]
    assert "REDIS_URL=redis://" in report["runworker"]
    off = [line for line in report["logs"] if "Schedules are off" in line[2]]
    assert len(off) == 1, report["logs"]
    assert "none of the 1 configured schedule(s) fires" in off[0][2]
    assert "t" not in report["enqueue"]["inline"]["ran"]  # the schedule's payload


def test_no_network__cache_is_local_memory(probe: tuple[dict[str, Any], list[Any]]) -> None:
    report, _ = probe

    assert report["cache"] == ["LocMemCache", "kept"]
