"""Celery's tasks: a Redis broker, no result backend, settings left at their defaults."""

from celery import Celery

from bench.peers import tasks

app = Celery("bench", broker=tasks.URL)
app.conf.broker_connection_retry_on_startup = True  # the default; set to silence its warning


@app.task
def noop(n: int) -> None:
    tasks.noop()


@app.task
def stamp(sent: float) -> None:
    tasks.stamp(sent)


@app.task
def sleeper() -> None:
    tasks.sleeper()
