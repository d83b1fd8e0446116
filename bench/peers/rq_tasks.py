"""RQ's tasks: plain functions, imported by the work horse through their dotted path."""

from bench.peers import tasks


def noop(n: int) -> None:
    tasks.noop()


def stamp(sent: float) -> None:
    tasks.stamp(sent)


def sleeper() -> None:
    tasks.sleeper()
