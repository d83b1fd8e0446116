"""The scenarios, 1-8 in the order of issue 7, 9-11 from issue 12, 12 (flows) from issue 16,
20a-20c (a Sentinel failover, a Cluster master's) from issue 20, 21 (scenario 1 on a sharded
queue): each fills in a Result; raising fails it."""

from __future__ import annotations

from collections.abc import Callable

from tests.chaos.harness import Run
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios import (
    aof,
    bad_input,
    cluster,
    eviction,
    flows,
    frozen_worker,
    gil,
    kills,
    oom,
    outage,
    partition,
    poison,
    redis_faults,
    sentinel,
    sigterm,
    skew,
    slow,
    soak,
    supervisor_kill,
)

Scenario = Callable[[Run, Profile, Result], None]

#: (key for --only, title, function), in the order they run.
SCENARIOS: list[tuple[str, str, Scenario]] = [
    ("1", "1 kill -9 children/workers", kills.run),
    ("2", "2 SIGTERM, restarted", sigterm.run),
    ("3a", "3a Redis CLIENT KILL, SIGSTOP", redis_faults.connections_and_freeze),
    ("3b", "3b Redis restart, no persistence", redis_faults.restart_without_persistence),
    ("3c", "3c Redis restart, appendonly", redis_faults.restart_with_aof),
    ("3d", "3d Redis kill -9, fsync always", aof.always),
    ("3e", "3e Redis kill -9, fsync everysec", aof.everysec),
    ("4", "4 worker frozen past lease", frozen_worker.run),
    ("5", "5 handler holds the GIL", gil.run),
    ("6", "6 poison tasks", poison.run),
    ("7", "7 bad input", bad_input.run),
    ("8", "8 soak", soak.run),
    ("9", "9 kill -9 of the supervisor", supervisor_kill.run),
    ("10", "10 Redis paused past the lease", outage.run),
    ("11", "11 maxmemory, noeviction", oom.run),
    ("12", "12 flows: kill -9, Redis restart (AOF)", flows.run),
    ("13", "13 partition worker/Redis, drops", partition.run),
    ("14", "14 slow Redis (+50 ms)", slow.run),
    ("15", "15 maxmemory, allkeys-lru", eviction.run),
    ("16", "16 clock skew, +-120 s", skew.run),
    ("20a", "20a Sentinel kill -9, REPLICA_ACKS=1", sentinel.with_replica_acks),
    ("20b", "20b Sentinel kill -9, REPLICA_ACKS=0", sentinel.without_replica_acks),
    ("20c", "20c Cluster master kill -9", cluster.master_kill),
    ("21", "21 kill -9, a queue of 4 shards", kills.sharded),
]
