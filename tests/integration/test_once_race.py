"""Two real processes racing once() on the same keys: exactly one effect per key.

On PostgreSQL the racers share the test database; on SQLite (the test's own database is in
memory) they share a database file made for the race, where SQLite's single writer serialises
them, and there must still be exactly one effect per key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

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


COUNT = """
import json
import django
django.setup()
from testproject.probes.models import Effect

effects = Effect.objects.all()
print(json.dumps({
    "effects": effects.count(),
    "keys": effects.values("key").distinct().count(),
    "pids": len(set(effects.values_list("pid", flat=True))),
}))
"""


def _database_url(tmp_path: Path) -> str:
    """The database the racers share: the test database on PostgreSQL, a new file on SQLite."""
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{s['PORT'] or 5432}/{s['NAME']}"
    assert connection.vendor == "sqlite", connection.vendor
    return f"sqlite:///{tmp_path / 'race.sqlite3'}"


def _run(code: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.django_db(transaction=True)
def test_once__two_processes_racing_on_50_keys_make_50_effects(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        DATABASE_URL=_database_url(tmp_path),
        DJANGO_SETTINGS_MODULE="testproject.settings",
    )
    if connection.vendor == "sqlite":
        _run("import django; django.setup()\n"
             "from django.core.management import call_command\n"
             "call_command('migrate', verbosity=0)", env)  # fmt: skip
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
    counts = json.loads(_run(COUNT, env))
    assert sum(firsts) == KEYS
    assert (counts["effects"], counts["keys"]) == (KEYS, KEYS)
    if connection.vendor == "postgresql":
        # Both processes won some keys: they did race (not one finishing before the other
        # began). Not on SQLite: its busy handler sleeps while the other process writes, and
        # the sleeper may wake to find every key taken.
        assert counts["pids"] == PROCESSES
