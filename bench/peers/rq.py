"""RQ: one `rq worker`, which forks a work horse per job and runs one job at a time; matched:
`rq worker-pool -n N`, N such workers under one pool process."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "RQ"
REQUIREMENTS = ("rq==3.0.0", "redis==8.1.0")
DISTS = ("rq",)
QUEUE = "default"


def default_concurrency() -> int:
    return 1  # a worker runs one job at a time


def how(concurrency: int | None) -> str:
    if concurrency is None:
        return "rq worker: 1 job at a time, a fork per job (the defaults)"
    return f"rq worker-pool -n {concurrency}: {concurrency} workers, a fork per job each"


def worker(ctx: Context) -> list[str]:
    if ctx.concurrency is None:
        return [str(ctx.bindir / "rq"), "worker", "--url", ctx.url, "--quiet", QUEUE]
    return [str(ctx.bindir / "rq"), "worker-pool", "--url", ctx.url, "--quiet",
            "-n", str(ctx.concurrency), QUEUE]  # fmt: skip


@functools.cache
def _queue() -> Any:
    from redis import Redis
    from rq import Queue

    from bench.peers.tasks import URL

    return Queue(QUEUE, connection=Redis.from_url(URL))


def enqueue(n: int) -> None:
    from bench.peers.rq_tasks import noop

    queue = _queue()
    for i in range(n):
        queue.enqueue(noop, i)


def enqueue_many(n: int) -> None:
    from rq import Queue

    from bench.peers.rq_tasks import noop

    _queue().enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(n)])


def stamp(sent: float) -> None:
    from bench.peers.rq_tasks import stamp

    _queue().enqueue(stamp, sent)


def sleeper() -> None:
    from bench.peers.rq_tasks import sleeper

    _queue().enqueue(sleeper)
