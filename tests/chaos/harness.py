"""What the battery works with: runworker processes, and one stage per scenario (the Redis
servers it starts, and what /proc tells, are in processes.py).

A stage is one scenario's world: a namespace of its own on a Redis server, a log directory for
the Chaos job, JOBS overridden for the battery's own enqueues, the workers it started and the
faults it injected. Leaving the stage kills its workers and deletes its namespace's keys, and
nothing else: the shared Redis is never flushed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from django.test.utils import override_settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_jobs import keys
from django_jobs.broker.shards import shards_for
from django_jobs.conf import get_settings
from testproject.probes.jobs import Chaos, ChaosWork
from tests.chaos.checker import Fault, Ledger, Log
from tests.chaos.processes import ChaosError, RedisServer, marked, read_rss_kib, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: Timings shortened so that recovery happens within the battery's patience (DESIGN.md).
FAST: dict[str, Any] = {
    "LEASE": 3,
    "HEARTBEAT_INTERVAL": 1,
    "RECOVERER_INTERVAL": 1,
    "TIMEOUT_GRACE": 1,
}
#: How long a run may go on once another worker has taken its task over (a lost lease): a
#: heartbeat to learn it, the grace to interrupt it, and a second of slack. Two runs of one task
#: on two workers overlapping longer than this after a fault was lifted are a failure.
STALE_RUN = FAST["HEARTBEAT_INTERVAL"] + FAST["TIMEOUT_GRACE"] + 1
QUEUES = ("critical", "default", "low")


def admin_client(url: str) -> redis.Redis:
    """A client for the battery's own reads, patient enough to ride out a fault's end."""
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=2,
        socket_timeout=5,
        retry=Retry(NoBackoff(), 2),
    )


class Worker:
    """One `manage.py runworker` in a process group of its own (supervisor plus children)."""

    def __init__(
        self, stage: Stage, name: str, concurrency: int, queues: Iterable[str] = ()
    ) -> None:
        self.stage = stage
        self.name = name
        self.concurrency = concurrency
        self.queues = tuple(queues)
        self.log_path = stage.dir / f"worker-{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: Variables set in its environment over the stage's (another REDIS_URL, say).
        self.env: dict[str, str] = {}

    def start(self) -> Worker:
        args = [sys.executable, str(ROOT / "manage.py"), "runworker"]
        args += ["--concurrency", str(self.concurrency)]
        if self.queues:
            args += ["--queues", ",".join(self.queues)]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                args,
                cwd=ROOT,
                env={**self.stage.worker_env(self.name), **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, to freeze or kill as a whole
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def children(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return []
        return [int(pid) for pid in text.split()]

    def pids(self) -> set[int]:
        return {self.pid, *self.children()}

    def processes(self) -> set[int]:
        """Every live process of this worker, whoever its parent is now (by its environment)."""
        return marked(CHAOS_WORKER=self.name, CHAOS_LOG_DIR=str(self.stage.log_dir))

    def registered(self) -> bool:
        """Whether its heartbeat is in the registry and all its children are up."""
        if not self.alive:
            raise ChaosError(f"worker {self.name} exited:\n{self.tail()}")
        ids = self.stage.client.zrange(keys.workers(self.stage.namespace), 0, -1)
        beating = any(f":{self.pid}:" in worker_id for worker_id in ids)
        return beating and len(self.children()) >= self.concurrency

    def wait_ready(self, timeout: float = 60) -> Worker:
        wait_until(self.registered, timeout, f"worker {self.name} ready", interval=0.1)
        return self

    def signal_group(self, signum: int) -> None:
        os.killpg(self.pid, signum)

    def kill9(self) -> set[int]:
        """kill -9 the supervisor and its children at once; return their pids."""
        pids = self.pids()
        self.signal_group(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=30)
        return pids

    def kill9_supervisor(self) -> tuple[set[int], float, float]:
        """kill -9 the supervisor alone, as an OOM killer or a container runtime would; return
        the worker's processes just before, the time of the kill and the time it was dead."""
        pids = self.processes() | self.pids()
        at = time.time()
        os.kill(self.pid, signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=30)
        return pids, at, time.time()

    def exit_code(self, timeout: float) -> int:
        assert self.process is not None
        process = self.process
        wait_until(lambda: process.poll() is not None, timeout, f"worker {self.name} exiting")
        return int(process.returncode)

    def rss_kib(self) -> dict[int, int]:
        return {pid: read_rss_kib(pid) for pid in self.pids()}

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def stop_quietly(self) -> None:
        """Kill it (group and all) if it still runs, and any child that outlived it: the end
        of a stage."""
        if self.alive:
            try:
                self.signal_group(signal.SIGCONT)
                self.signal_group(signal.SIGKILL)
            except ProcessLookupError:
                pass
            assert self.process is not None
            self.process.wait(timeout=30)
        self.kill_leftovers()

    def kill_leftovers(self) -> set[int]:
        """kill -9 each process of this worker still alive (by pid); return their pids."""
        left = self.processes() if self.process is not None else set()
        for pid in left:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left


@dataclass
class Stage:
    """One scenario's world; use as a context manager."""

    run: Run
    name: str
    redis_url: str
    extra: dict[str, Any]
    namespace: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:10]}")
    workers: list[Worker] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)

    def __post_init__(self) -> None:
        self.dir = self.run.tmp / "".join(c if c.isalnum() else "-" for c in self.name)
        self.log_dir = self.dir / "log"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log = Log(self.log_dir)
        self.jobs = {"REDIS_URL": self.redis_url, "NAMESPACE": self.namespace, **FAST, **self.extra}
        self.client = admin_client(self.redis_url)
        self.rng = random.Random(f"{self.run.seed}:{self.name}")
        self._override = override_settings(JOBS=self.jobs)

    def __enter__(self) -> Stage:
        self._override.enable()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for worker in self.workers:
            worker.stop_quietly()
        try:
            self.delete_keys()
        except redis.RedisError:
            pass  # a private server that is gone with its keys
        self._override.disable()
        self.client.close()

    # -- processes --------------------------------------------------------------------------

    def worker_env(self, name: str) -> dict[str, str]:
        """The environment of worker `name`: CHAOS_WORKER marks its processes and log lines."""
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "JOBS_EXTRA")}
        env.update(
            DJANGO_SETTINGS_MODULE="testproject.settings",
            REDIS_URL=self.redis_url,
            JOBS_NAMESPACE=self.namespace,
            JOBS_EXTRA=json.dumps({**FAST, **self.extra}),
            JOBS_LOG_LEVEL="INFO",
            DATABASE_URL=f"sqlite:///{self.dir / 'worker.sqlite3'}",
            CHAOS_LOG_DIR=str(self.log_dir),
            CHAOS_WORKER=name,
            PYTHONUNBUFFERED="1",
        )
        return env

    def worker(self, name: str, concurrency: int, queues: Iterable[str] = ()) -> Worker:
        worker = Worker(self, name, concurrency, queues)
        self.workers.append(worker)
        self.run.workers.append(worker)
        return worker

    def start_workers(self, count: int, concurrency: int) -> list[Worker]:
        workers = [self.worker(f"w{i}", concurrency).start() for i in range(count)]
        for worker in workers:
            worker.wait_ready()
        return workers

    def replace(self, worker: Worker) -> Worker:
        """Start a new worker in the place of one that stopped (as a process manager would)."""
        return self.worker(f"{worker.name}'", worker.concurrency, worker.queues).start()

    # -- work -------------------------------------------------------------------------------

    def enqueue(
        self, count: int, make: Callable[[int], ChaosWork] | None = None, **options: Any
    ) -> list[str]:
        """Enqueue count Chaos jobs in one batch; record them as accepted (or uncertain).

        Raises what enqueue raised (BrokerUnavailable, or worse) after recording every number of
        the batch as uncertain: the enqueue may still have been applied.
        """
        make = make or (lambda n: ChaosWork(n))
        works = [make(self.ledger.next_n()) for _ in range(count)]
        sent = time.time()
        try:
            handles = Chaos.enqueue_many(works, **options)
        except BaseException:
            # Whatever it raised, it may have been applied: never "unexpected" if it runs
            self.ledger.uncertain.update(w.n for w in works)
            raise
        now = time.time()
        for work, handle in zip(works, handles, strict=True):
            self.ledger.accept(handle.id, work.n, handle.queue, sent, now)
        return [handle.id for handle in handles]

    def fault(
        self,
        kind: str,
        start: float,
        end: float,
        pids: Iterable[int] = (),
        cap: int = 0,
        *,
        lifted: float | None = None,
        overlap: float = 0.0,
    ) -> Fault:
        """Record a fault the battery injected (see checker.Fault for what each field excuses)."""
        fault = Fault(kind, start, end, frozenset(pids), cap, lifted, overlap)
        self.faults.append(fault)
        return fault

    # -- Redis ------------------------------------------------------------------------------

    def key(self, queue: str, structure: str) -> str:
        return f"{self.namespace}:{{{queue}}}:{structure}"

    def idle(self) -> bool:
        """No task pending, active, scheduled or waiting for a retry, in any queue or shard."""
        pipe = self.client.pipeline(transaction=False)
        for queue in shards_for(get_settings()).expand(QUEUES):
            pipe.llen(self.key(queue, "pending"))
            pipe.llen(self.key(queue, "active"))
            pipe.zcard(self.key(queue, "scheduled"))
            pipe.zcard(self.key(queue, "retry"))
        return not any(pipe.execute())

    def records(self, ids: Iterable[str], *fields: str) -> dict[str, list[str | None]]:
        """The given fields of each task's record (None where missing), in whichever shard of
        its queue holds it (a queue of one shard: the queue itself)."""
        shards = shards_for(get_settings())
        asked = [(i, q) for i in ids for q in shards.of(self.ledger.accepted[i].queue)]
        pipe = self.client.pipeline(transaction=False)
        for task_id, queue in asked:
            pipe.hmget(self.key(queue, f"t:{task_id}"), list(fields))
        found: dict[str, list[str | None]] = {}
        for (task_id, _), values in zip(asked, pipe.execute(), strict=True):
            if task_id not in found or any(v is not None for v in values):
                found[task_id] = values
        return found

    def states(self) -> dict[str, tuple[str | None, str | None]]:
        """Every accepted task's state and error in Redis."""
        records = self.records(self.ledger.accepted, "state", "error")
        return {i: (r[0], r[1]) for i, r in records.items()}

    def key_count(self) -> int:
        return sum(1 for _ in self.client.scan_iter(match=f"{self.namespace}:*", count=1000))

    def delete_keys(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.namespace}:*", count=1000))
        for start in range(0, len(keys), 500):
            self.client.delete(*keys[start : start + 500])

    def drain(self, timeout: float, expect: set[str] | None = None) -> None:
        """Wait until every expected job is done and no task is left to run."""
        if expect is None:
            expect = self.ledger.expected()

        def drained() -> bool:
            missing = expect - self.log.read().done_ids()
            if not self.idle():
                return False
            # A task can end dead instead (the crash budget under many kills): the checker
            # decides whether that was fair; the drain is over either way.
            return not missing or all(
                r == ["dead"] for r in self.records(missing, "state").values()
            )

        try:
            wait_until(drained, timeout, "drain", interval=0.2)
        except ChaosError as exc:
            missing = len(expect - self.log.done_ids())
            raise ChaosError(f"{exc} ({missing} expected jobs never done)") from None
        self.log.read()


@dataclass
class Run:
    """One battery run: its temporary directory, the shared Redis URL, and what it started."""

    redis_url: str
    tmp: Path
    seed: int
    workers: list[Worker] = field(default_factory=list)
    servers: list[RedisServer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stage(self, name: str, url: str = "", /, **extra: Any) -> Stage:
        """A stage on the Redis at url (default: the shared one), JOBS keys overridden."""
        return Stage(self, name, url or self.redis_url, extra)

    def server(
        self, name: str, *, appendonly: bool = False, extra: tuple[str, ...] = ()
    ) -> RedisServer:
        server = RedisServer(self.tmp / f"redis-{name}", appendonly=appendonly, extra=extra)
        self.servers.append(server)
        return server.start()

    def cleanup(self) -> None:
        """Kill any worker still running and stop every Redis this run started."""
        for worker in self.workers:
            try:
                worker.stop_quietly()
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for server in self.servers:
            server.stop()
