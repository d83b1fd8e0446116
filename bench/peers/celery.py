"""Celery with its Redis broker: one worker, the default prefork pool with 4 children."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.peers import Context

TITLE = "Celery"
HOW = "celery worker -P prefork -c 4 (acks early, the default)"
REQUIREMENTS = ("celery[redis]==5.7.0",)
DISTS = ("celery", "kombu")


def worker(ctx: Context) -> list[str]:
    return [str(ctx.bindir / "celery"), "-A", "bench.peers.celery_tasks", "worker",
            "-P", "prefork", "-c", "4", "--loglevel", "WARNING"]  # fmt: skip


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
