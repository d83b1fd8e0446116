"""Dramatiq's actors on its Redis broker (default middleware)."""

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peers import tasks

dramatiq.set_broker(RedisBroker(url=tasks.URL))


@dramatiq.actor
def noop(n: int) -> None:
    tasks.noop()


@dramatiq.actor
def stamp(sent: float) -> None:
    tasks.stamp(sent)


@dramatiq.actor
def sleeper() -> None:
    tasks.sleeper()
