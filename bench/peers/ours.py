"""django-jobs: one `manage.py runworker` with 4 child processes, in the project's own venv.

The jobs are testproject's probes (Noop, Stamp, Sleep): the worker imports them as it would any
project's jobs. Ours counts finished jobs with its own per-day `processed` counter (one MGET per
poll, which the harness leaves out of the command counts), not with the peers' done file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.peers import ROOT

if TYPE_CHECKING:
    import redis

    from bench.peers import Context

TITLE = "django-jobs"
HOW = "manage.py runworker --concurrency 4"
REQUIREMENTS = ()
DISTS = ("django-redis-jobs", "django")
QUEUE = "default"
DONE_COMMANDS = 1  # Redis commands per done() poll


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
    return [ctx.python, str(ROOT / "manage.py"), "runworker",
            "--concurrency", "4", "--queues", QUEUE]  # fmt: skip


def _namespace(ctx: Context) -> str:
    return ctx.env["JOBS_NAMESPACE"]


def done(ctx: Context, probe: redis.Redis) -> int:
    from django_jobs.keys import QueueKeys

    keys = QueueKeys(_namespace(ctx), QUEUE)
    days = {time.strftime("%Y-%m-%d", time.gmtime(time.time() - s)) for s in (0, 86400)}
    return sum(int(n or 0) for n in probe.mget([keys.processed(day) for day in days]))


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
    from testproject.probes.jobs import Noop, Number

    for i in range(n):
        Noop.enqueue(Number(i))


def enqueue_many(n: int) -> None:
    from testproject.probes.jobs import Noop, Number

    Noop.enqueue_many(Number(i) for i in range(n))


def stamp(sent: float) -> None:
    from testproject.probes.jobs import Sent, Stamp

    Stamp.enqueue(Sent(sent))


def sleeper() -> None:
    from testproject.probes.jobs import Sleep, Work

    Sleep.enqueue(Work("kill9", 60.0))
