"""Dramatiq with its Redis broker: one worker process with 4 threads."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "Dramatiq"
HOW = "dramatiq --processes 1 --threads 4"
REQUIREMENTS = ("dramatiq[redis]==2.2.1",)
DISTS = ("dramatiq",)


def worker(ctx: Context) -> list[str]:
    return [str(ctx.bindir / "dramatiq"), "bench.peers.dramatiq_tasks",
            "--processes", "1", "--threads", "4"]  # fmt: skip


def enqueue(n: int) -> None:
    from bench.peers.dramatiq_tasks import noop

    for i in range(n):
        noop.send(i)


enqueue_many = None  # group() sends one message per task


def stamp(sent: float) -> None:
    from bench.peers.dramatiq_tasks import stamp

    stamp.send(sent)


def sleeper() -> None:
    from bench.peers.dramatiq_tasks import sleeper

    sleeper.send()
