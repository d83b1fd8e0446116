"""Jobs the worker tests run in a real `runworker`: each reports what it did to Redis.

Every report lives under `<namespace>:probe:` so that a test's namespace cleanup removes it.
"""

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from django.db import connection

from django_jobs import Job, JobCanceled, once
from django_jobs.client import get_broker
from django_jobs.keys import QueueKeys
from django_jobs.mail import DeliverEmail, EmailPayload
from testproject.probes.models import Effect


def _key(name: str) -> str:
    return f"{get_broker().settings.namespace}:probe:{name}"


@dataclass(frozen=True)
class Work:
    tag: str
    seconds: float = 0.0


class CleanUp(Job[Work]):
    """Sleep until interrupted (a lost lease, a timeout), then spend `seconds` cleaning up, saying
    so as it starts (probe:cleaning) and when done (probe:cleaned)."""

    def run(self, payload: Work) -> None:
        client = get_broker().client
        client.hset(_key("started"), payload.tag, f"{os.getpid()}:{self.context.attempt}")
        try:
            time.sleep(60)
        except BaseException:
            client.rpush(_key("cleaning"), payload.tag)
            time.sleep(payload.seconds)
            client.rpush(_key("cleaned"), payload.tag)
            raise


@contextmanager
def _at_once(running: str, most: str) -> Iterator[None]:
    """Count the runs inside the block at once, across processes (probe:<running>), and keep
    the most seen (probe:<most>)."""
    client = get_broker().client
    now = client.incr(_key(running))
    client.eval(
        "if tonumber(redis.call('GET', KEYS[1]) or 0) < tonumber(ARGV[1]) then "
        "redis.call('SET', KEYS[1], ARGV[1]) end",
        1,
        _key(most),
        now,
    )
    try:
        yield
    finally:
        client.decr(_key(running))


class Sleep(Job[Work]):
    """Sleep, counting how many run at once (probe:running, probe:max_running)."""

    def run(self, payload: Work) -> None:
        client = get_broker().client
        client.hset(_key("started"), payload.tag, f"{os.getpid()}:{self.context.attempt}")
        with _at_once("running", "max_running"):
            time.sleep(payload.seconds)
        client.rpush(_key("done"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")


class BusyLoop(Job[Work]):
    """Spin in pure Python until interrupted."""

    def run(self, payload: Work) -> None:
        get_broker().client.hset(_key("started"), payload.tag, os.getpid())
        n = 0
        while True:
            n += 1


class SleepForever(Job[Work]):
    def run(self, payload: Work) -> None:
        get_broker().client.hset(_key("started"), payload.tag, os.getpid())
        time.sleep(10**6)


class SocketRead(Job[Work]):
    """Block reading from a socket that never answers (the test listens on the port in seconds)."""

    def run(self, payload: Work) -> None:
        get_broker().client.hset(_key("started"), payload.tag, os.getpid())
        with socket.create_connection(("127.0.0.1", int(payload.seconds))) as conn:
            conn.recv(1)


class HoldGil(Job[Work]):
    """Stay inside one C call for a long time: signal handlers cannot run until it returns."""

    def run(self, payload: Work) -> None:
        get_broker().client.hset(_key("started"), payload.tag, os.getpid())
        sum(range(10**11))


class CrashOnce(Job[Work]):
    """Kill its own process on the first run, succeed on the next."""

    def run(self, payload: Work) -> None:
        client = get_broker().client
        if client.hsetnx(_key("crashed"), payload.tag, os.getpid()):
            os.kill(os.getpid(), 9)
        client.rpush(_key("done"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")


@dataclass(frozen=True)
class Number:
    n: int


class Noop(Job[Number]):
    """Do nothing: what bench.drain times is the worker around it."""

    def run(self, payload: Number) -> None:
        pass


_touch: tuple[int, redis.Redis] | None = None


def touch() -> None:
    """One Redis command, as a real job's one piece of I/O: INCR probe:touched on database 1 of
    the broker's Redis, through a connection of this process's own (the benchmarks' no-op: every
    system's does the same, and the harness counts finished jobs by it)."""
    global _touch
    if _touch is None or _touch[0] != os.getpid():
        broker = get_broker()
        url = broker.settings.redis_url
        assert url is not None, "touch() needs REDIS_URL"
        _touch = (os.getpid(), redis.Redis.from_url(url, db=1))
    _touch[1].incr(_key("touched"))


class Touch(Job[Number]):
    """The benchmarks' no-op job: one INCR on database 1 (touch())."""

    def run(self, payload: Number) -> None:
        touch()


@dataclass(frozen=True)
class Visit:
    #: time.time() when the job was enqueued.
    sent: float
    #: Seconds to sleep (the capacity benchmark's 400 ms job).
    seconds: float
    #: The job's data, about 1 KB in bench.capacity.
    data: str = ""


class Visitor(Job[Visit]):
    """bench.capacity's job: one query on the default database (a connection held, as a real
    job's), a sleep, and how long after its enqueue it started (probe:visits, in seconds)."""

    def run(self, payload: Visit) -> None:
        started = time.time() - payload.sent
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        time.sleep(payload.seconds)
        get_broker().client.rpush(_key("visits"), started)


@dataclass(frozen=True)
class Sent:
    #: time.time() when the job was enqueued.
    sent: float


class Stamp(Job[Sent]):
    """Record how long after its enqueue it started running (probe:latency, in seconds)."""

    def run(self, payload: Sent) -> None:
        get_broker().client.rpush(_key("latency"), time.time() - payload.sent)


@dataclass(frozen=True)
class ChaosWork:
    #: The battery's own number for this enqueue: a job id is unknown when enqueue raises.
    n: int
    #: Seconds to sleep (interruptible work).
    seconds: float = 0.0
    #: Length of a sum(range(...)): C code that holds the GIL for the whole call.
    spin: int = 0
    #: "" succeeds; "raise" fails every run; "crash" kills its own process every run.
    fail: str = ""
    #: Characters in the message of the "raise" error (a huge traceback).
    message_size: int = 0


def _chaos_log(event: str, job_id: str, n: int, attempt: int) -> None:
    """Append one line to this process's log in $CHAOS_LOG_DIR (one O_APPEND write: it survives
    kill -9 of the process right after, and two processes never share a file). The last field
    names the worker ($CHAOS_WORKER, inherited by its children): which runs shared a worker."""
    path = os.path.join(os.environ["CHAOS_LOG_DIR"], f"{os.getpid()}.log")
    worker = os.environ.get("CHAOS_WORKER", "-")
    line = f"{event} {job_id} {n} {attempt} {os.getpid()} {time.time():.6f} {worker}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Chaos(Job[ChaosWork]):
    """The reliability battery's job (tests/chaos): log "start", work, then log "done".

    A "done" line is written only after the work, so a job id with two "done" lines ran to
    completion twice. A run cut short says so where it can: "abort" when an exception leaves
    the handler (a timeout, a lost lease, the poison's error), "crash" just before the poison
    kills its own process. Each run's line of the end dates it, so the checker can tell two
    runs of one task at the same time from two in a row. Nothing else is written anywhere: the
    log is the battery's evidence.
    """

    def run(self, payload: ChaosWork) -> None:
        job_id, attempt = self.context.job_id, self.context.attempt
        _chaos_log("start", job_id, payload.n, attempt)
        try:
            if payload.fail == "crash":
                _chaos_log("crash", job_id, payload.n, attempt)
                os.kill(os.getpid(), 9)
            if payload.seconds:
                time.sleep(payload.seconds)
            if payload.spin:
                sum(range(payload.spin))
            if payload.fail == "raise":
                raise RuntimeError(f"poison {payload.n}: " + "x" * payload.message_size)
        except BaseException:
            _chaos_log("abort", job_id, payload.n, attempt)
            raise
        _chaos_log("done", job_id, payload.n, attempt)


class OnceEffect(Job[Work]):
    """Write one Effect row inside once(), then, on the first run only, kill its own process
    after the block committed and before the worker could acknowledge the task."""

    def run(self, payload: Work) -> None:
        with once(f"probe:{payload.tag}") as first:
            if first:
                Effect.objects.create(key=payload.tag, pid=os.getpid())
        client = get_broker().client
        client.rpush(_key("runs"), f"{payload.tag}:{self.context.attempt}:{int(first)}")
        if client.hsetnx(_key("crashed"), payload.tag, os.getpid()):
            os.kill(os.getpid(), 9)
        client.rpush(_key("done"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")


class DeliverThenCrash(DeliverEmail):
    """Deliver a queued mail as DeliverEmail does, then, on the first run only, kill its own
    process: the mail went out and its row committed, but the task was never acknowledged."""

    def run(self, payload: EmailPayload) -> None:
        super().run(payload)
        client = get_broker().client
        client.rpush(_key("runs"), f"mail:{self.context.attempt}")
        if client.hsetnx(_key("crashed"), "mail", os.getpid()):
            os.kill(os.getpid(), 9)
        client.rpush(_key("done"), f"mail:{self.context.attempt}:{self.context.crashes}")


class AtomicCrash(Job[Work]):
    """An atomic job: write one Effect row, then, on the first run only, kill its own process
    inside run(), before its transaction commits."""

    atomic = True

    def run(self, payload: Work) -> None:
        Effect.objects.create(key=payload.tag, pid=os.getpid())
        client = get_broker().client
        client.rpush(_key("runs"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")
        if client.hsetnx(_key("crashed"), payload.tag, os.getpid()):
            os.kill(os.getpid(), 9)
        client.rpush(_key("done"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")


class HoldGilOnce(Job[Work]):
    """On the first run, stay inside one C call past any timeout (the supervisor kills it);
    on the next, finish."""

    def run(self, payload: Work) -> None:
        client = get_broker().client
        client.rpush(_key("runs"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")
        if client.hsetnx(_key("crashed"), payload.tag, os.getpid()):
            sum(range(10**11))
        client.rpush(_key("done"), f"{payload.tag}:{self.context.attempt}:{self.context.crashes}")


class Tally(Job[Work]):
    """Count the runs of each tag (probe:tally), nothing else: the outbox's exactly-once tests."""

    def run(self, payload: Work) -> None:
        get_broker().client.hincrby(_key("tally"), payload.tag, 1)


@dataclass(frozen=True)
class Greeting:
    to: str
    times: int = 1


class Greet(Job[Greeting]):
    """The job of tests/fixtures/task_records_v1.json, records of an earlier release (under the
    name they carry): each run is listed in probe:greeted."""

    name = "upgrades.Greet"

    def run(self, payload: Greeting) -> None:
        get_broker().client.rpush(_key("greeted"), f"{payload.to}:{payload.times}")


@dataclass(frozen=True)
class Person:
    """A payload that refuses itself, quoting its value, when built from "reject:..." (as a
    __post_init__ check of a payload class changed while its tasks waited would)."""

    email: str

    def __post_init__(self) -> None:
        if self.email.startswith("reject:"):
            raise ValueError(f"{self.email} is not an address")


class Private(Job[Person]):
    """A sensitive job (tests/acceptance/test_sensitive_worker.py): lists each run's address."""

    sensitive = True
    max_attempts = 1

    def run(self, payload: Person) -> None:
        get_broker().client.rpush(_key("private"), payload.email)


class Public(Job[Person]):
    """Private's twin that is not sensitive."""

    max_attempts = 1

    def run(self, payload: Person) -> None:
        get_broker().client.rpush(_key("public"), payload.email)


class Capped(Job[Work]):
    """At most 2 at once across every worker (tests/acceptance/test_limits_worker.py): sleep
    `seconds`, counting how many run at once (probe:capped, probe:capped_most); list each run
    (probe:capped_done: tag, attempt, crashes)."""

    concurrency_limit = 2

    def run(self, payload: Work) -> None:
        with _at_once("capped", "capped_most"):
            time.sleep(payload.seconds)
        _done(self, "capped_done", payload.tag)


class CappedOnce(Job[Work]):
    """One at a time across every worker: on its first delivery (no crash yet) sleep a minute,
    for the test to kill its worker under it; list each finished run (probe:capped_once_done)."""

    concurrency_limit = 1

    def run(self, payload: Work) -> None:
        get_broker().client.hset(_key("started"), payload.tag, os.getpid())
        if self.context.crashes == 0 and payload.seconds:
            time.sleep(payload.seconds)
        _done(self, "capped_once_done", payload.tag)


class Paced(Job[Work]):
    """At most 4 starts a second across every worker: list each run's start as dequeue wrote it
    in its record (Redis time: the time the limit counts), in probe:paced."""

    rate_limit = "4/s"

    def run(self, payload: Work) -> None:
        broker = get_broker()
        record = QueueKeys(broker.settings.namespace, self.context.queue).task(self.context.job_id)
        started = broker.client.hget(record, "started_at")
        when = started.decode() if isinstance(started, bytes) else str(started)
        broker.client.rpush(_key("paced"), f"{payload.tag}:{self.context.attempt}:{when}")


class Cancelable(Job[Work]):
    """Sleep in short steps for a minute, until canceled (probe:canceled lists the tags that saw
    JobCanceled); then, by the tag's first word: "return" catches it and returns, "raise" lets
    it propagate, "ignore" catches it and sleeps on (until its child is killed)."""

    max_attempts = 3

    def run(self, payload: Work) -> None:
        client = get_broker().client
        client.hset(_key("started"), payload.tag, f"{os.getpid()}:{self.context.attempt}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                time.sleep(0.02)
            except JobCanceled:
                client.rpush(_key("canceled"), payload.tag)
                if payload.tag.startswith("raise"):
                    raise
                if payload.tag.startswith("return"):
                    return
        client.rpush(_key("done"), payload.tag)


def _done(job: Job[Work], name: str, tag: str) -> None:
    context = job.context
    get_broker().client.rpush(_key(name), f"{tag}:{context.attempt}:{context.crashes}")


from testproject.probes import async_jobs as async_jobs  # noqa: E402  (registers the async probes)
