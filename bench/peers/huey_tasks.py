"""Huey's tasks on RedisHuey (blocking reads, the default)."""

from huey import RedisHuey

from bench.peers import tasks

huey = RedisHuey("bench", url=tasks.URL)


@huey.task()
def noop(n: int) -> None:
    tasks.noop()


@huey.task()
def stamp(sent: float) -> None:
    tasks.stamp(sent)


@huey.task()
def sleeper() -> None:
    tasks.sleeper()
