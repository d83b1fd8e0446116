"""Dramatiq with its Redis broker: by default a process per CPU, 8 threads each."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "Dramatiq"
REQUIREMENTS = ("dramatiq[redis]==2.2.1", "redis==8.1.0")
DISTS = ("dramatiq",)
THREADS = 8  # dramatiq's default --threads; --processes defaults to the CPU count


def default_concurrency() -> int:
    return (os.cpu_count() or 1) * THREADS


def how(concurrency: int | None) -> str:
    if concurrency is None:
        return f"dramatiq: a process per CPU x {THREADS} threads (the defaults)"
    return f"dramatiq --processes 1 --threads {concurrency}"


def worker(ctx: Context) -> list[str]:
    command = [str(ctx.bindir / "dramatiq"), "bench.peers.dramatiq_tasks"]
    if ctx.concurrency is not None:
        command += ["--processes", "1", "--threads", str(ctx.concurrency)]
    return command


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
