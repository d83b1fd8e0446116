"""Huey: one consumer with 4 worker processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "Huey"
HOW = "huey_consumer -w 4 -k process"
REQUIREMENTS = ("huey==3.5.4", "redis")
DISTS = ("huey",)


def worker(ctx: Context) -> list[str]:
    return [str(ctx.bindir / "huey_consumer"), "bench.peers.huey_tasks.huey",
            "-w", "4", "-k", "process", "--quiet"]  # fmt: skip


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
