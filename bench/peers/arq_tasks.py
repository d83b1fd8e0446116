"""arq's coroutines and worker settings; `python -m bench.peers.arq_tasks` runs the worker.

Run through `run_worker` rather than the `arq` command, whose logging setup has no quiet level.
"""

import asyncio
import os
import sys
import time
from typing import Any

from arq import run_worker
from arq.connections import RedisSettings

from bench.peers import key, tasks


async def noop(ctx: dict[str, Any], n: int) -> None:
    tasks.noop()


async def stamp(ctx: dict[str, Any], sent: float) -> None:
    await ctx["redis"].rpush(key(tasks.SYSTEM, "latency"), time.time() - sent)


async def sleeper(ctx: dict[str, Any]) -> None:
    await ctx["redis"].rpush(key(tasks.SYSTEM, "started"), os.getpid())
    await asyncio.sleep(tasks.SLEEP)


class WorkerSettings:
    functions = [noop, stamp, sleeper]
    redis_settings = RedisSettings.from_dsn(tasks.URL)
    max_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 10  # bench.peers.arq.worker passes it


if __name__ == "__main__":
    run_worker(WorkerSettings)  # type: ignore[arg-type]
