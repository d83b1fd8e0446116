"""Two real processes racing once() on the same keys: exactly one effect per key (PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from testproject.probes.models import Effect

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 2
CALLS = 500
KEYS = 50

RACER = """
import os, sys
import django
django.setup()
from django_jobs import once
from testproject.probes.models import Effect

print("ready", flush=True)
sys.stdin.readline()  # "go": every racer starts at once
firsts = 0
# The first racer goes up the keys and the second down, so that they meet and contend.
for i in range({calls}):
    n = i % {keys} if sys.argv[1] == "0" else {keys} - 1 - i % {keys}
    key = f"race:{{n}}"
    with once(key) as first:
        if first:
            firsts += 1
            Effect.objects.create(key=key, pid=os.getpid())
print(firsts, flush=True)
"""


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_once__two_processes_racing_on_50_keys_make_50_effects() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the race needs two processes on one server database (DATABASE_URL=postgres)")
    env = dict(
        os.environ, DATABASE_URL=_database_url(), DJANGO_SETTINGS_MODULE="testproject.settings"
    )
    code = RACER.format(calls=CALLS, keys=KEYS)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(n)],
            cwd=ROOT,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(PROCESSES)
    ]
    for racer in racers:
        assert racer.stdout is not None
        assert racer.stdout.readline().strip() == "ready", racer.communicate()[1]
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    results = [racer.communicate(timeout=60) for racer in racers]

    assert [r.returncode for r in racers] == [0] * PROCESSES, [err for _, err in results]
    firsts = [int(out.strip()) for out, _ in results]
    assert sum(firsts) == KEYS
    assert Effect.objects.count() == KEYS
    assert Effect.objects.values("key").distinct().count() == KEYS
    # Both processes won some keys: they did race (not one finishing before the other began).
    assert len(set(Effect.objects.values_list("pid", flat=True))) == PROCESSES
