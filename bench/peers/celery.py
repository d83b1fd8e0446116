"""Celery with its Redis broker: one worker, the default prefork pool (a child per CPU)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "Celery"
REQUIREMENTS = ("celery[redis]==5.7.0", "kombu==5.7.0", "billiard==4.3.2", "redis==8.1.0")
DISTS = ("celery", "kombu")


def default_concurrency() -> int:
    return os.cpu_count() or 1  # the prefork pool's default: one child per CPU


def how(concurrency: int | None) -> str:
    pool = "one child per CPU" if concurrency is None else f"-c {concurrency}"
    return f"celery worker, prefork pool, {pool} (acks early, the default)"


def worker(ctx: Context) -> list[str]:
    command = [str(ctx.bindir / "celery"), "-A", "bench.peers.celery_tasks", "worker",
               "--loglevel", "WARNING"]  # fmt: skip
    if ctx.concurrency is not None:
        command += ["-P", "prefork", "-c", str(ctx.concurrency)]
    return command


def enqueue(n: int) -> None:
    from bench.peers.celery_tasks import noop

    for i in range(n):
        noop.delay(i)


enqueue_many = None  # group() and chunks() publish one message per task


def stamp(sent: float) -> None:
    from bench.peers.celery_tasks import stamp

    stamp.delay(sent)


def sleeper() -> None:
    from bench.peers.celery_tasks import sleeper

    sleeper.delay()
