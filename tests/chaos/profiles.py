"""How hard each scenario pushes: "short" runs in CI (under 5 minutes), "long" by hand."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    #: Scenario 1: jobs drained by two workers, and kill -9s (children and whole workers).
    kill_jobs: int
    kills: int
    #: Scenario 1, then: kill -9s of children running no-op jobs, one every STORM_SPACING.
    storm_kills: int
    #: Scenario 2: jobs drained while workers get SIGTERM and are restarted, and how often.
    term_jobs: int
    terms: int
    #: Scenario 3: rounds of CLIENT KILL (several each) and freezes; restarts of each kind.
    redis_rounds: int
    restarts: int
    #: Scenario 4: times a worker is frozen past its lease.
    freezes: int
    #: Scenario 6: poison tasks of each kind (crash, raise).
    poison: int
    #: Scenario 8: soak length in seconds and enqueue rate in jobs per second.
    soak_seconds: float
    soak_rate: float
    #: Scenario 9: kill -9s of a busy worker's supervisor alone.
    supervisor_kills: int
    #: Scenario 10: times Redis is paused for longer than the lease under running tasks.
    outages: int
    #: Scenario 11: windows of maxmemory with noeviction under enqueues and a worker.
    oom_windows: int
    #: Scenario 12: three-step flows replayed under kill -9s of whole workers (and one Redis
    #: restart with AOF), and how many kills.
    flows: int = 200
    flow_kills: int = 4
    #: Scenario 13: partitions of a worker from Redis (through the proxy).
    partitions: int = 1
    #: Scenario 14: jobs drained direct, then as many through a proxy adding 50 ms.
    slow_jobs: int = 100
    #: Scenario keys this profile leaves out (too slow for CI's short run).
    skip: frozenset[str] = frozenset()


PROFILES = {
    "short": Profile(
        name="short",
        kill_jobs=1000,
        kills=10,
        storm_kills=100,
        term_jobs=400,
        terms=3,
        redis_rounds=1,
        restarts=1,
        freezes=1,
        poison=2,
        soak_seconds=30,
        soak_rate=50,
        supervisor_kills=3,
        outages=1,
        oom_windows=1,
        # Each fault class once in CI: 3c (a Redis restart with AOF) is 12's fault too, and 3e
        # (kill -9, fsync everysec) 3d's with a weaker guarantee. 20a-20c: a Sentinel setup or
        # a Cluster of their own each, 15 to 30 s apiece. 21: scenario 1's faults again, on a
        # sharded queue (20 s). All in the long profile.
        skip=frozenset({"3c", "3e", "16", "20a", "20b", "20c", "21"}),
    ),
    "long": Profile(
        name="long",
        kill_jobs=5000,
        kills=32,
        storm_kills=300,
        term_jobs=3000,
        terms=20,
        redis_rounds=4,
        restarts=3,
        freezes=3,
        poison=5,
        soak_seconds=600,
        soak_rate=50,
        supervisor_kills=10,
        outages=3,
        oom_windows=4,
        flows=1000,
        flow_kills=10,
        partitions=3,
        slow_jobs=400,
    ),
}
