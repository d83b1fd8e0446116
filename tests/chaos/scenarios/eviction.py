"""Scenario 15: Redis with an eviction policy (`allkeys-lru`), pushed past maxmemory.

The worker must warn at start-up that this Redis evicts keys (worker/banner.py). Then, with a
backlog waiting, `CONFIG SET maxmemory` to just above the memory in use and more jobs enqueued:
Redis makes room by evicting keys, any of ours (task records, queue lists, the registry). The
limit is lifted and the worker drains what is left. What an eviction does is the known cost of
that configuration, so every job is allowed to be lost: the battery counts what was evicted and
what became of the jobs (run, filed dead as "record evicted" by the worker that met an id whose
record went, gone without a trace), and fails on what no eviction excuses: two runs of one task
at once, a job run that was never accepted, a worker that died or a queue left stuck, and a
worker that did not report the evictions (its janitor logs what Redis' evicted_keys grew by).
"""

from __future__ import annotations

import time
from collections import Counter

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import FAST, STALE_RUN, Run
from tests.chaos.processes import ChaosError, wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import conclude

CONCURRENCY = 2
POLICY = "allkeys-lru"
BACKLOG = 200
#: Jobs enqueued once maxmemory is set, in batches, each batch making Redis evict.
MORE = 200
HEADROOM = 16 * 1024
AFTERMATH = FAST["LEASE"] + FAST["RECOVERER_INTERVAL"] + 3
WARNING = f"maxmemory-policy {POLICY}"
#: What the worker's janitor logs when Redis evicted keys (worker/janitor.py).
REPORT = "Redis evicted "


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "-"
    server = run.server("eviction")
    try:
        with run.stage("eviction", server.url, ENQUEUE_TIMEOUT=2.0, JANITOR_INTERVAL=1) as stage:
            stage.client.config_set("maxmemory-policy", POLICY)
            (worker,) = stage.start_workers(1, CONCURRENCY)
            # The warning is written before the children start: it is there once it is ready
            warned = WARNING in worker.output()
            stage.enqueue(BACKLOG, lambda n: ChaosWork(n, seconds=0.05))
            at = time.time()
            used = int(stage.client.info("memory")["used_memory"])
            stage.client.config_set("maxmemory", used + HEADROOM)
            for _ in range(MORE // 20):
                stage.enqueue(20, lambda n: ChaosWork(n, seconds=0.05))
            evicted = int(stage.client.info("stats")["evicted_keys"])
            stage.client.config_set("maxmemory", 0)
            lifted = time.time()
            stage.ledger.may_lose |= set(stage.ledger.accepted)
            stage.fault(
                "eviction",
                at - 1,
                lifted + AFTERMATH,
                cap=CONCURRENCY,
                lifted=lifted,
                overlap=STALE_RUN,
            )
            conclude(stage, result, drain=60, states=False)
            done = stage.log.done_ids()
            gone = set(stage.ledger.accepted) - done
            result.known_lost = len(gone)
            records = stage.records(gone, "state", "error")
            left = {i: r[0] for i, r in records.items() if r[0] is not None}
            reported = sum(1 for r in records.values() if (r[1] or "").startswith("record evicted"))
            result.note(
                f"maxmemory-policy {POLICY}, {len(stage.ledger.accepted)} jobs accepted, "
                f"{evicted} key(s) evicted: {len(done)} jobs ran, {len(gone)} never ran "
                f"({reported} of them dead as 'record evicted'; {len(gone) - len(left)} without "
                f"a record left, {len(left)} with one: "
                f"{dict(sorted(Counter(left.values()).items()))}; a record pending whose queue "
                f"list was evicted is stranded, reported only by the eviction count)"
            )
            result.expect(warned, f"the worker did not warn about {WARNING!r}:\n{worker.tail()}")
            try:  # within a janitor tick and a back-off (a tick refused under maxmemory)
                wait_until(lambda: REPORT in worker.output(), 8, "the eviction report")
                reported_evictions = True
            except ChaosError:
                reported_evictions = False
            result.expect(
                reported_evictions,
                f"the worker did not log the evictions ({REPORT!r}):\n{worker.tail()}",
            )
            result.expect(evicted, "Redis evicted nothing: nothing was tested")
            result.expect(worker.alive, f"the worker exited:\n{worker.tail()}")
    finally:
        server.stop()
