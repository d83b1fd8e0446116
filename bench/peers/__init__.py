"""The systems `python -m bench` compares: django-jobs ("ours") and its peers, one module each.

A module `bench/peers/<name>.py` holds, for the harness (which runs in the project's venv):

- ``TITLE``, ``REQUIREMENTS`` (the PyPI pins installed into ``.bench-venv/<name>/``: the peer
  and the Redis client it runs on; empty for ours, which runs in the project's venv) and
  ``DISTS`` (the distributions whose versions the table reports);
- ``default_concurrency()``: how many jobs at once the worker runs when started as its own docs
  start it (``ctx.concurrency`` None); ``how(concurrency)``: that command line's gist for the
  notes (None: the defaults);
- ``worker(ctx)``: the command line of one worker process tree, at the system's defaults or at
  ``ctx.concurrency`` jobs at once;

and, for `bench.peers.driver`, which runs in the system's own venv (the producer side):

- ``enqueue(n)``: n no-op jobs, one call each; ``enqueue_many(n)`` (or None: no bulk API);
- ``stamp(sent)``: one job that pushes ``time.time() - sent`` to `latency_key`;
- ``sleeper()``: one job that records its start in `started_key`, then sleeps 60 s.

The worker imports `bench/peers/<name>_tasks.py`, which defines the three tasks with the helpers
of `bench.peers.tasks`. Imports of the peer itself stay inside functions: the harness imports
these modules without the peers installed.

Ours overrides `done`, `latency_key` and `started`: its jobs are testproject's probes.

Each system runs at its defaults and at each of MATCHED jobs at once (`setups`); a matched
concurrency equal to the default is the default's run, not taken twice.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import redis

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("ours", "celery", "rq", "dramatiq", "huey", "arq")
#: The order each run measures them in: django-jobs right next to the fastest peers, so that a
#: shared machine's drift between them is as small as it can be, and RQ (minutes a run) last.
RUN_ORDER = ("ours", "huey", "dramatiq", "celery", "arq", "rq")
#: The concurrencies every system runs at besides its defaults (ours' default is 10).
MATCHED = (2, 4, 10)
#: Where the no-op jobs count themselves (one INCR each; the queues are on database 0).
DONE_DB = 1


def setups(system: str) -> list[int | None]:
    """None (the system's defaults), then each matched concurrency the defaults do not cover."""
    default = load(system).default_concurrency()
    return [None, *(c for c in MATCHED if c != default)]


@dataclass
class Context:
    """One system as the harness runs it: where its Redis is, which Python, which env."""

    system: str  # the module name under bench.peers
    label: str  # the row's name
    url: str
    python: str  # the interpreter of the system's venv
    tag: str  # names its log files
    env: dict[str, str] = field(default_factory=dict)
    #: Jobs at once in the worker's tree; None: the system's own defaults.
    concurrency: int | None = None

    @property
    def module(self) -> ModuleType:
        return load(self.system)

    @property
    def bindir(self) -> Path:
        return Path(self.python).parent

    def full_env(self) -> dict[str, str]:
        """The environment of this system's workers and driver."""
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "BENCH_SYSTEM": self.system,
            "BENCH_REDIS_URL": self.url,
            **self.env,
        }


def load(system: str) -> ModuleType:
    return importlib.import_module(f"bench.peers.{system}")


def key(system: str, name: str) -> str:
    """A peer's probe key: `bench:<system>:<name>` (cleared with the database)."""
    return f"bench:{system}:{name}"


# The defaults, for a peer; ours has its own.


def done(ctx: Context, probe: redis.Redis) -> int:
    """How many no-op jobs finished: each INCRs `bench:<system>:done` (probe: database 1)."""
    return int(probe.get(key(ctx.system, "done")) or 0)


def latency_key(ctx: Context) -> str:
    return key(ctx.system, "latency")


def started(ctx: Context, probe: redis.Redis) -> int:
    """How many times the sleeper job started."""
    return int(probe.llen(key(ctx.system, "started")))


def get(ctx: Context, name: str):  # type: ignore[no-untyped-def]
    """The module's own `name` if it has one, else the default above."""
    return getattr(ctx.module, name, None) or globals()[name]
