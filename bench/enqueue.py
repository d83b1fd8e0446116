"""Enqueue and consume throughput of django-jobs, with the Redis round trips each job costs.

    .venv/bin/python -m bench.enqueue [--count N | --quick] [--redis-url URL] [--[no-]private]

Phases: (a) N calls of Job.enqueue, (b) one Job.enqueue_many over N payloads, (c) the bare
consumer loop (Processor.process_one: dequeue, decode, run a no-op, ack) on the jobs' queue
until it is empty, so it handles the 2N jobs of (a) and (b). (A worker serving several queues
asks each higher-priority queue first: one more round trip per queue that is empty.)

Columns: round trips/job are counted in the client (one per request sent and answered; a
pipeline is one); scripts/job and calls/job come from `INFO commandstats` deltas, where
calls include the commands run inside the Lua scripts. By default the benchmark starts a
redis-server of its own (when one is on PATH), so no other client skews those counts. Only the
keys of its own namespace are deleted at the end; a server it started is then stopped.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench.common import DEFAULT_URL, bench_redis, commandstats, delete_namespace, versions
from django_jobs import Job

QUEUE = "default"
SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval")


@dataclass(frozen=True)
class Payload:
    n: int
    tag: str = "bench"


class Noop(Job[Payload]):
    name = "bench.Noop"
    queue = QUEUE

    def run(self, payload: Payload) -> None:
        pass


@dataclass(frozen=True)
class Row:
    phase: str
    jobs: int
    seconds: float
    round_trips: int
    scripts: int
    calls: int


class RoundTrips:
    count = 0


def count_round_trips(client: redis.Redis) -> None:
    """Count every request client sends from now on (its pool has not connected yet)."""
    pool = client.connection_pool
    base: Any = pool.connection_class

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        RoundTrips.count += 1
        base.send_packed_command(self, command, check_health)

    pool.connection_class = type(
        f"Counted{base.__name__}", (base,), {"send_packed_command": send_packed_command}
    )


def measure(phase: str, probe: redis.Redis, run: Callable[[], int]) -> Row:
    before, trips = commandstats(probe), RoundTrips.count
    start = time.perf_counter()
    jobs = run()
    seconds = time.perf_counter() - start
    trips = RoundTrips.count - trips
    after = commandstats(probe)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if k != "cmdstat_info"}
    scripts = sum(delta.get(k, 0) for k in SCRIPT_COMMANDS)
    return Row(phase, jobs, seconds, trips, scripts, sum(delta.values()))


def bench(url: str, count: int, where: str) -> None:
    from django.conf import settings
    from django.test.utils import override_settings

    from django_jobs.client import get_broker
    from django_jobs.keys import State
    from django_jobs.worker.processor import Processor

    logging.getLogger("django_jobs").setLevel(logging.WARNING)  # no line per task
    namespace = f"bench-{uuid.uuid4().hex[:12]}"
    probe = redis.Redis.from_url(url, decode_responses=True)
    payloads = [Payload(n) for n in range(count)]

    def single() -> int:
        for payload in payloads:
            Noop.enqueue(payload)
        return count

    def bulk() -> int:
        return len(Noop.enqueue_many(payloads))

    def consume() -> int:
        processor, done = Processor(broker, [QUEUE]), 0
        while (outcome := processor.process_one()) is not None:
            assert outcome.state == State.COMPLETED, outcome
            done += 1
        return done

    jobs = {**settings.JOBS, "REDIS_URL": url, "NAMESPACE": namespace}
    try:
        with override_settings(JOBS=jobs):
            broker = get_broker()
            count_round_trips(broker.client)
            for script in broker.scripts.values():  # no phase pays for a NOSCRIPT reload
                broker.client.script_load(script.script)
            rows = [
                measure("single enqueue", probe, single),
                measure("enqueue_many", probe, bulk),
                measure("dequeue+run+ack", probe, consume),
            ]
    finally:
        deleted = delete_namespace(probe, namespace)

    print(f"django-jobs enqueue benchmark: N={count}, {where}, namespace {namespace}")
    print(versions(probe))
    print()
    head = ("phase", "jobs", "seconds", "jobs/s", "round trips/job", "scripts/job", "calls/job")
    print(
        f"{head[0]:<16}{head[1]:>7}{head[2]:>9}{head[3]:>9}{head[4]:>17}{head[5]:>13}{head[6]:>11}"
    )
    for r in rows:
        print(
            f"{r.phase:<16}{r.jobs:>7}{r.seconds:>9.2f}{r.jobs / r.seconds:>9.0f}"
            f"{r.round_trips / r.jobs:>17.3f}{r.scripts / r.jobs:>13.2f}"
            f"{r.calls / r.jobs:>11.2f}"
        )
    print(f"\n(deleted {deleted} keys of namespace {namespace})")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.enqueue",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--count", type=int, default=20_000, help="jobs per phase (20000)")
    parser.add_argument("--quick", action="store_true", help="N=2000")
    parser.add_argument("--redis-url", help=f"an existing Redis (default {DEFAULT_URL})")
    parser.add_argument(
        "--private",
        action=argparse.BooleanOptionalAction,
        help="start a redis-server of our own (default: when one is on PATH "
        "and no --redis-url is given)",
    )
    args = parser.parse_args()
    count = 2000 if args.quick else args.count
    if args.private and args.redis_url:
        parser.error("--private starts its own Redis: leave out --redis-url")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    with bench_redis(args.redis_url, args.private) as (url, where):
        bench(url, count, where)


if __name__ == "__main__":
    main()
