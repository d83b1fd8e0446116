"""Huey: one consumer, by default with one worker thread; matched: N worker processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "Huey"
REQUIREMENTS = ("huey==3.5.4", "redis==8.1.0")
DISTS = ("huey",)


def default_concurrency() -> int:
    return 1  # huey_consumer's -w default, with -k thread


def how(concurrency: int | None) -> str:
    if concurrency is None:
        return "huey_consumer: 1 worker thread (the defaults)"
    return f"huey_consumer -w {concurrency} -k process (processes: faster here than threads)"


def worker(ctx: Context) -> list[str]:
    command = [str(ctx.bindir / "huey_consumer"), "bench.peers.huey_tasks.huey", "--quiet"]
    if ctx.concurrency is not None:
        command += ["-w", str(ctx.concurrency), "-k", "process"]
    return command


def enqueue(n: int) -> None:
    from bench.peers.huey_tasks import noop

    for i in range(n):
        noop(i)


enqueue_many = None  # task.map() enqueues one at a time


def stamp(sent: float) -> None:
    from bench.peers.huey_tasks import stamp

    stamp(sent)


def sleeper() -> None:
    from bench.peers.huey_tasks import sleeper

    sleeper()
