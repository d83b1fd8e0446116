"""What a task costs in Redis, pending and completed (kept for RETENTION), and what a worker's
job slot costs in memory: django-jobs' against Celery's prefork pool.

    .venv/bin/python -m bench.memory [--quick] [--venvs DIR]

Redis (a private redis-server, no other client): N tasks of a job whose payload is a 1 KB
string, enqueued with enqueue_many; `INFO memory` used_memory before and after, over N, is a
pending task's cost. Then an in-process consumer (Processor.process_one) runs them all and the
delta again is a completed task's, kept with the default RETENTION (24 h). For each state,
`MEMORY USAGE` of one task record and of the state's structure over N, the record's encoding,
and its fields' sizes: where the bytes go.

The floor: what the same keys cost holding less, on a fresh private Redis: the message alone
in a string key (a 1 KB payload in our JSON, in jemalloc's size classes, with a key's fixed
overhead), a key holding one byte (that overhead alone), and a record holding only its
message (a hash's own overhead on top), against the completed sorted set's share.

The hot path's commands: the same tasks drained the way a worker child does (`settle`: the
ack of the last task and the fetch of the next in one ack_dequeue call each), with
`INFO commandstats` reset first; the commands Redis ran inside the scripts, per job.

Worker: `runworker --concurrency 10` and `celery worker -P prefork -c 10` (Celery's venv from
`python -m bench`, when it exists), each idle after 200 no-op jobs ran; per process, RSS and
PSS (/proc/<pid>/smaps_rollup; PSS splits each shared page among its sharers), the tree's sum,
and the PSS per job slot (the tree's PSS over 10).

N=10000 (--quick: 1000).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.common import private_redis
from bench.harness import Worker, fill, tree, wait_until
from django_jobs import Job

QUEUE = "default"
PAYLOAD_BYTES = 1024
SLOTS = 10


@dataclass(frozen=True)
class Kilo:
    data: str


class KiloJob(Job[Kilo]):
    name = "bench.Kilo"
    queue = QUEUE

    def run(self, payload: Kilo) -> None:
        pass


def used(probe: redis.Redis) -> int:
    return int(probe.info("memory")["used_memory"])


def record_report(probe: redis.Redis, key: str) -> list[str]:
    """The record's MEMORY USAGE, encoding and its fields' sizes (name + value bytes)."""
    fields: dict[bytes, bytes] = probe.hgetall(key)
    usage = probe.memory_usage(key, samples=0) or 0
    encoding = probe.object("encoding", key)
    raw = sum(len(k) + len(v) for k, v in fields.items())
    names = sum(len(k) for k in fields)
    lines = [
        f"    record {usage:,} bytes (MEMORY USAGE), encoding {encoding!r}, {len(fields)} fields: "
        f"{raw:,} bytes of names and values ({names} of names)"
    ]
    sizes = sorted(((len(v), k.decode()) for k, v in fields.items()), reverse=True)
    lines.append("    " + ", ".join(f"{k} {n:,}" for n, k in sizes))
    return lines


def redis_side(count: int, listpack_value: int | None = None) -> None:
    """listpack_value: CONFIG SET hash-max-listpack-value first (None: the server's default)."""
    import logging

    from django.test.utils import override_settings

    from django_jobs.client import get_broker
    from django_jobs.worker.processor import Processor

    logging.getLogger("django_jobs").setLevel(logging.WARNING)  # no line per task
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    data = "x" * PAYLOAD_BYTES
    with private_redis() as url, override_settings(JOBS={"REDIS_URL": url, "NAMESPACE": namespace}):
        probe = redis.Redis.from_url(url)
        if listpack_value is not None:
            probe.config_set("hash-max-listpack-value", listpack_value)
        setting = probe.config_get("hash-max-listpack-value")["hash-max-listpack-value"]
        broker = get_broker()
        k = broker.keys(QUEUE)
        KiloJob.enqueue(Kilo(data))  # scripts loaded, connection made: then the baseline
        Processor(broker, [QUEUE]).process_one()
        probe.delete(k.completed)
        for key in probe.scan_iter(match=f"{namespace}:{{{QUEUE}}}:t:*"):
            probe.delete(key)
        base = used(probe)
        handles = KiloJob.enqueue_many([Kilo(data) for _ in range(count)])
        pending = used(probe) - base
        sample = k.task(handles[0].id)
        print(
            f"django-jobs in Redis, {count:,} tasks, payload {PAYLOAD_BYTES} bytes of data, "
            f"hash-max-listpack-value {setting}:"
        )
        print(
            f"  pending:   {pending / count:,.0f} bytes a task (INFO used_memory delta); "
            f"pending list {(probe.memory_usage(k.pending) or 0) / count:,.1f} a task"
        )
        print("\n".join(record_report(probe, sample)))
        processor = Processor(broker, [QUEUE])
        while processor.process_one() is not None:
            pass
        completed = used(probe) - base
        print(
            f"  completed: {completed / count:,.0f} bytes a task, kept for RETENTION "
            f"({broker.settings.retention:g} s); completed sorted set "
            f"{(probe.memory_usage(k.completed) or 0) / count:,.1f} a task"
        )
        print("\n".join(record_report(probe, sample)))
        msg = probe.hget(sample, "msg") or b""
        message = len(msg)
        print(f"  the message without the data: {msg.replace(data.encode(), b'<data>').decode()}")
        print(
            f"  the message itself (JSON: payload, job, options) is {message:,} bytes: a completed "
            f"task costs {completed / count / message:.2f}x its message, "
            f"{completed / count / PAYLOAD_BYTES:.2f}x its 1 KB payload"
        )
        day_rate = 45 * 86400 * completed / count
        print(
            f"  at 45 jobs/s kept 24 h: {day_rate / 1e9:.2f} GB (the design note estimates "
            f"~3.9 GB at 1 KB a task)"
        )


def floor(count: int) -> None:
    """What the record's keys cost with less in them (see the module's docstring)."""
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    from django_jobs.message import Message, encode

    # As enqueue writes it (the defaults' options: 5 attempts, 300 s, 24 h).
    kilo = {"data": "x" * PAYLOAD_BYTES}
    message = encode(Message(uuid.uuid4().hex, KiloJob.name, QUEUE, kilo, 5, 300.0, 86400.0))
    keys = [f"{namespace}:{{{QUEUE}}}:t:{uuid.uuid4().hex}" for _ in range(count)]
    with private_redis() as url:
        probe = redis.Redis.from_url(url)

        def per_key(write: str, value: str) -> float:
            probe.flushall()
            base = used(probe)
            pipe = probe.pipeline(transaction=False)
            for key in keys:
                if write == "set":
                    pipe.set(key, value)
                else:
                    pipe.hset(key, "msg", value)
            pipe.execute()
            return (used(probe) - base) / count

        alone, overhead = per_key("set", message), per_key("set", "x")
        hashed = per_key("hset", message)
    print(
        f"\nThe floor, {count:,} keys named as records: the message ({len(message):,} bytes) "
        f"alone in a string key {alone:,.0f} bytes a key; a key of one byte {overhead:,.0f} "
        f"(a key's fixed overhead); a hash holding only the message {hashed:,.0f}"
    )


def hot_path(count: int) -> None:
    """The commands inside the ack-and-fetch script per job (INFO commandstats)."""
    from django.test.utils import override_settings

    from django_jobs.broker.protocol import Action, Verdict
    from django_jobs.client import get_broker

    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    with private_redis() as url, override_settings(JOBS={"REDIS_URL": url, "NAMESPACE": namespace}):
        probe = redis.Redis.from_url(url)
        broker = get_broker()
        KiloJob.enqueue_many([Kilo("x" * PAYLOAD_BYTES) for _ in range(count + 1)])
        held = broker.dequeue([QUEUE])  # scripts loaded: then the count starts
        probe.config_resetstat()
        jobs = 0
        while held is not None:
            ack = Verdict(held.id, QUEUE, held.epoch, KiloJob.name, Action.ACK, retention=86400)
            _, fetched = broker.settle([ack], [QUEUE], 1)
            held = fetched[0] if fetched else None
            jobs += 1
        stats = {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in probe.info("commandstats").items()
        }
        scripts = stats.pop("evalsha", 0)
        inner = {name: calls for name, calls in stats.items() if name not in NOT_INNER}
        print(
            f"\nThe hot path, {jobs:,} jobs acked and fetched one at a time (settle): "
            f"{scripts / jobs:.2f} script calls and {sum(inner.values()) / jobs:.2f} commands "
            f"inside them a job:"
        )
        ranked = sorted(inner.items(), key=lambda item: -item[1])
        print("  " + ", ".join(f"{name} {calls / jobs:.2f}" for name, calls in ranked))


#: The commands of the client and the bench itself, not of the scripts.
NOT_INNER = {"info", "config|resetstat", "client|id", "client|setinfo", "hello", "script|load"}


def smaps(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def worker_side(venvs: Path, jobs: int) -> None:
    from bench.peers import Context, get, load

    systems = {"ours": sys.executable}
    celery = venvs / "celery" / "bin" / "python"
    if celery.exists():
        systems["celery"] = str(celery)
    else:
        print(f"(no {celery}: `python -m bench --systems celery` makes it; Celery left out)")
    print(f"\nWorker memory, {SLOTS} slots, idle after {jobs} no-op jobs:")
    with private_redis() as url, tempfile.TemporaryDirectory() as tmp:
        probe = redis.Redis.from_url(url, db=1)
        for system, python in systems.items():
            module = load(system)
            ctx = Context(system, module.TITLE, url, python, f"mem-{system}", concurrency=SLOTS)
            if hasattr(module, "environment"):
                ctx.env = module.environment(url, Path(tmp), f"mem-{uuid.uuid4().hex[:8]}", {})
            worker = Worker(ctx, Path(tmp) / f"{system}.log", sample_rss=False)
            try:
                fill(ctx, jobs)
                done, this = get(ctx, "done"), ctx
                wait_until(f"{system}: {jobs} jobs", lambda: done(this, probe) >= jobs, 120)  # noqa: B023
                time.sleep(1.0)
                pids = sorted(tree(worker.pid))
                rows = [(pid, smaps(pid)) for pid in pids]
                rss = sum(r.get("Rss", 0) for _, r in rows)
                pss = sum(r.get("Pss", 0) for _, r in rows)
                print(
                    f"  {module.TITLE}: {len(pids)} processes, RSS {rss / 2**20:.0f} MiB, PSS "
                    f"{pss / 2**20:.0f} MiB, PSS per slot {pss / SLOTS / 2**20:.1f} MiB"
                )
                for pid, r in rows:
                    print(
                        f"    pid {pid}: RSS {r.get('Rss', 0) / 2**20:5.1f}  PSS "
                        f"{r.get('Pss', 0) / 2**20:5.1f}  of which anonymous "
                        f"{r.get('Pss_Anon', 0) / 2**20:5.1f}  private dirty "
                        f"{r.get('Private_Dirty', 0) / 2**20:5.1f} MiB"
                    )
            finally:
                worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="N=1000")
    parser.add_argument(
        "--venvs", type=Path, default=Path(__file__).resolve().parents[1] / ".bench-venv"
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    count = 1000 if args.quick else 10_000
    redis_side(count)
    print()
    redis_side(count, listpack_value=2048)  # what a listpack record would cost
    floor(count)
    hot_path(count)
    worker_side(args.venvs, 200)


if __name__ == "__main__":
    main()
