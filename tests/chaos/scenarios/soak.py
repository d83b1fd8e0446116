"""Scenario 8: a soak. Enqueue and drain at a steady rate, on a Redis of the battery's own so
that its memory is the worker's doing, and sample once a second:

- the workers' resident memory (supervisors and children, from /proc/<pid>/status);
- Redis' used_memory;
- the number of keys in the namespace.

After warm-up (the first third), the last third may not sit above the middle third by more than
a small margin, and the key count never exceeds what retention allows (RETENTION 5 s, a janitor
every second). Once the feeder stops and retention has passed, only a handful of keys remain.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from testproject.probes.jobs import ChaosWork
from tests.chaos.harness import Run, Stage
from tests.chaos.processes import wait_until
from tests.chaos.profiles import Profile
from tests.chaos.report import Result
from tests.chaos.scenarios.common import Feeder, conclude

WORKERS = 2
CONCURRENCY = 2
RETENTION = 5
JANITOR_INTERVAL = 1
SAMPLE_EVERY = 1.0
#: Keys that do not come and go with tasks: queue structures, counters, the worker registry.
FIXED_KEYS = 40
#: Allowed growth from the middle third to the last: a ratio plus an absolute slack.
RSS_GROWTH = (1.05, 4 * 1024)  # KiB
REDIS_GROWTH = (1.10, 1024 * 1024)  # bytes
KEY_GROWTH = (1.10, 20)


@dataclass(frozen=True)
class Sample:
    at: float
    rss_kib: int
    redis_bytes: int
    keys: int


def sample(stage: Stage, started: float) -> Sample:
    rss = sum(sum(w.rss_kib().values()) for w in stage.workers if w.alive)
    used = int(stage.client.info("memory")["used_memory"])
    return Sample(time.monotonic() - started, rss, used, stage.key_count())


def thirds(values: list[int]) -> tuple[float, float]:
    """Mean of the middle third and of the last third."""
    third = len(values) // 3
    return statistics.mean(values[third : 2 * third]), statistics.mean(values[2 * third :])


def flat(result: Result, what: str, values: list[int], growth: tuple[float, float]) -> None:
    middle, last = thirds(values)
    result.expect(
        last <= middle * growth[0] + growth[1],
        f"{what} grew after warm-up: {middle:.0f} -> {last:.0f}",
    )


def run(run: Run, profile: Profile, result: Result) -> None:
    result.recovery_means = "-"
    server = run.server("soak")
    try:
        _soak(run, profile, result, server.url)
    finally:
        server.stop()


def _soak(run: Run, profile: Profile, result: Result, url: str) -> None:
    extra = {"RETENTION": RETENTION, "JANITOR_INTERVAL": JANITOR_INTERVAL}
    with run.stage("soak", url, **extra) as stage:
        stage.start_workers(WORKERS, CONCURRENCY)
        samples: list[Sample] = []
        started = time.monotonic()
        with Feeder(stage, profile.soak_rate, lambda n: ChaosWork(n)):
            while time.monotonic() - started < profile.soak_seconds:
                samples.append(sample(stage, started))
                # Pacing the samples, not waiting for a condition
                time.sleep(max(0.0, started + len(samples) * SAMPLE_EVERY - time.monotonic()))
        conclude(stage, result, drain=60, states=False)
        bound = int(profile.soak_rate * (RETENTION + JANITOR_INTERVAL + 2)) + FIXED_KEYS
        settled = wait_until(
            lambda: (n := stage.key_count()) <= FIXED_KEYS and n,
            RETENTION + JANITOR_INTERVAL + 30,
            "completed tasks purged after retention",
            interval=0.5,
        )

    rss = [s.rss_kib for s in samples]
    used = [s.redis_bytes for s in samples]
    keys = [s.keys for s in samples]
    flat(result, "worker RSS", rss, RSS_GROWTH)
    flat(result, "Redis used_memory", used, REDIS_GROWTH)
    flat(result, "the key count", keys, KEY_GROWTH)
    warm = keys[len(keys) // 3 :]
    result.expect(max(warm) <= bound, f"{max(warm)} keys, over the retention bound of {bound}")
    mib = 1024
    result.note(
        f"{profile.soak_seconds:g}s at {profile.soak_rate:g} jobs/s; "
        f"means of the middle and last thirds: worker RSS {thirds(rss)[0] / mib:.1f} -> "
        f"{thirds(rss)[1] / mib:.1f} MiB, Redis {thirds(used)[0] / mib**2:.2f} -> "
        f"{thirds(used)[1] / mib**2:.2f} MiB, keys {thirds(keys)[0]:.0f} -> {thirds(keys)[1]:.0f}"
    )
    result.note(
        f"keys at most {max(warm)} after warm-up (retention bound {bound}); {settled} once "
        f"drained and past retention"
    )
