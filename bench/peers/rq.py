"""RQ: one `rq worker`, which forks a work horse per job and runs one job at a time."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "RQ"
HOW = "rq worker: 1 job at a time (a worker has no concurrency), a fork per job"
REQUIREMENTS = ("rq==3.0.0",)
DISTS = ("rq",)
QUEUE = "default"


def worker(ctx: Context) -> list[str]:
    return [str(ctx.bindir / "rq"), "worker", "--url", ctx.url, "--quiet", QUEUE]


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
