"""django-jobs: one `manage.py runworker` (10 child processes by default), in the project's venv.

The jobs are testproject's probes (Touch, Stamp, Sleep): the worker imports them as it would any
project's jobs. Touch, the no-op, INCRs `<ns>:probe:touched` on database 1, as the peers' no-op
INCRs theirs; the harness counts finished jobs by it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.peers import ROOT

if TYPE_CHECKING:
    import redis

    from bench.peers import Context

TITLE = "django-jobs"
REQUIREMENTS = ()
DISTS = ("django-redis-jobs", "django", "hiredis")
QUEUE = "default"
CONCURRENCY = 10  # JOBS["CONCURRENCY"]'s default


def default_concurrency() -> int:
    return CONCURRENCY


def how(concurrency: int | None) -> str:
    if concurrency is None:
        return f"manage.py runworker: a supervisor and {CONCURRENCY} child processes (the defaults)"
    return f"manage.py runworker --concurrency {concurrency}"


def environment(url: str, tmp: Path, namespace: str, jobs: dict[str, Any]) -> dict[str, str]:
    """Read by testproject.settings in the harness's driver and in the worker."""
    import json

    return {
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "REDIS_URL": url,
        "JOBS_NAMESPACE": namespace,
        "JOBS_EXTRA": json.dumps(jobs),
        "JOBS_LOG_LEVEL": "WARNING",  # as the peers: no line per task
        "DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
    }


def worker(ctx: Context) -> list[str]:
    command = [ctx.python, str(ROOT / "manage.py"), "runworker", "--queues", QUEUE]
    if ctx.concurrency is not None:
        command += ["--concurrency", str(ctx.concurrency)]
    return command


def _namespace(ctx: Context) -> str:
    return ctx.env["JOBS_NAMESPACE"]


def done(ctx: Context, probe: redis.Redis) -> int:
    """probes.Touch's count (probe: database 1)."""
    return int(probe.get(f"{_namespace(ctx)}:probe:touched") or 0)


def latency_key(ctx: Context) -> str:
    return f"{_namespace(ctx)}:probe:latency"


_seen: dict[str, set[bytes]] = {}


def started(ctx: Context, probe: redis.Redis) -> int:
    """Sleep writes "<pid>:<attempt>" to probe:started on each start: count the values seen."""
    value = probe.hget(f"{_namespace(ctx)}:probe:started", "kill9")
    seen = _seen.setdefault(_namespace(ctx), set())
    if value is not None:
        seen.add(value)
    return len(seen)


# The producer side, in bench.peers.driver.


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()


def enqueue(n: int) -> None:
    from testproject.probes.jobs import Number, Touch

    for i in range(n):
        Touch.enqueue(Number(i))


def enqueue_many(n: int) -> None:
    from testproject.probes.jobs import Number, Touch

    Touch.enqueue_many(Number(i) for i in range(n))


def stamp(sent: float) -> None:
    from testproject.probes.jobs import Sent, Stamp

    Stamp.enqueue(Sent(sent))


def sleeper() -> None:
    from testproject.probes.jobs import Sleep, Work

    Sleep.enqueue(Work("kill9", 60.0))
