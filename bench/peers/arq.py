"""arq: one asyncio worker process running up to max_jobs jobs at once (10 by default; it polls
every 0.5 s)."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "arq"
REQUIREMENTS = ("arq==0.28.0", "redis[hiredis]==5.3.1")
DISTS = ("arq",)
MAX_JOBS = 10  # arq's default

_loop = asyncio.new_event_loop()


def default_concurrency() -> int:
    return MAX_JOBS


def how(concurrency: int | None) -> str:
    jobs = (
        f"max_jobs={MAX_JOBS} (the default)" if concurrency is None else f"max_jobs={concurrency}"
    )
    return f"arq worker, {jobs}; polls the queue every poll_delay=0.5 s (the default)"


def worker(ctx: Context) -> list[str]:
    return [ctx.python, "-m", "bench.peers.arq_tasks", str(ctx.concurrency or MAX_JOBS)]


@functools.cache
def _pool() -> Any:
    from arq import create_pool
    from arq.connections import RedisSettings

    from bench.peers.tasks import URL

    return _loop.run_until_complete(create_pool(RedisSettings.from_dsn(URL)))


def _run(function: str, calls: list[tuple[Any, ...]]) -> None:
    pool = _pool()

    async def each() -> None:
        for args in calls:
            await pool.enqueue_job(function, *args)

    _loop.run_until_complete(each())


def enqueue(n: int) -> None:
    _run("noop", [(i,) for i in range(n)])


enqueue_many = None  # no bulk API: one enqueue_job per job


def stamp(sent: float) -> None:
    _run("stamp", [(sent,)])


def sleeper() -> None:
    _run("sleeper", [()])
