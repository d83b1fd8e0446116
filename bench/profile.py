"""Where django-jobs' time goes: a single enqueue, and a drain at concurrency 10 on this machine.

    .venv/bin/python -m bench.profile [--quick] [--py-spy PATH] [--no-enqueue | --no-drain]

Enqueue (in this process, a private redis-server): N `Touch.enqueue` calls and N bare redis-py
`LPUSH` calls, in alternating blocks, timed (over all blocks, and each one's best block; and
this process's CPU time, which the machine's load moves least); the server's own microseconds
per EVALSHA and per LPUSH (`INFO commandstats` usec deltas); then N enqueue calls under
cProfile, the time per call by where it was spent (django_jobs' own code, redis-py, the socket,
json, uuid, the rest) and the functions of django_jobs with the most time of their own.

Drain: `runworker --concurrency 10` on a full queue of N Touch jobs (one INCR each). From the
first finished job to the last: CPU per job of the supervisor, of the children (summed) and of
redis-server (/proc/<pid>/stat), their context switches per job (voluntary and not,
/proc/<pid>/status), the Redis commands per job and the microseconds Redis spent in each
(`INFO commandstats`). With py-spy (on PATH or --py-spy), a second drain is sampled
(`py-spy record --nonblocking`, 250 Hz) in the supervisor and in one child: the functions
their samples were in, by own time and by total time.

N=20000 (--quick: 3000).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from bench.common import private_redis
from bench.harness import Worker, fill, tree, wait_until
from bench.peers import Context

HZ = os.sysconf("SC_CLK_TCK")
BLOCKS = 10


def usec(probe: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) per command since the server started."""
    stats: dict[str, dict[str, Any]] = probe.info("commandstats")
    return {k: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}


def usec_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    out = {}
    for k, (calls, us) in after.items():
        c0, u0 = before.get(k, (0, 0))
        if calls - c0 and k != "cmdstat_info":
            out[k.removeprefix("cmdstat_")] = (calls - c0, us - u0)
    return out


def where(filename: str) -> str:
    if "django_jobs" in filename:
        return "django_jobs"
    if "/redis/" in filename:
        return "redis-py"
    if "/json/" in filename:
        return "json"
    if "uuid" in filename:
        return "uuid"
    if "/django/" in filename:
        return "django"
    return "other"


def enqueue_profile(count: int) -> None:
    import logging

    from django.test.utils import override_settings

    from testproject.probes.jobs import Number, Touch

    logging.getLogger("django_jobs").setLevel(logging.WARNING)
    with private_redis() as url:
        jobs = {"REDIS_URL": url, "NAMESPACE": f"bench-{uuid.uuid4().hex[:8]}"}
        with override_settings(JOBS=jobs):
            probe = redis.Redis.from_url(url)
            floor = redis.Redis.from_url(url)
            Touch.enqueue(Number(0))
            floor.rpush("bench:floor", b"x" * 100)  # RPUSH: the script's own LPUSH stays apart
            size = count // BLOCKS
            before = usec(probe)

            def ours() -> None:
                for i in range(size):
                    Touch.enqueue(Number(i))

            def bare() -> None:
                for _ in range(size):
                    floor.rpush("bench:floor", b"x" * 100)

            (ours_wall, ours_cpu), (bare_wall, bare_cpu) = alternate([ours, bare])
            server = usec_delta(before, usec(probe))
            n = size * BLOCKS
            evalsha = server.get("evalsha", (1, 0))
            rpush_calls, rpush_us = server.get("rpush", (1, 0))
            inner = {k: v for k, v in server.items() if k not in ("evalsha", "rpush")}
            print(f"Single enqueue, {n:,} calls each, in {BLOCKS} alternating blocks:")
            for label, ours_s, bare_s, calls in (
                ("all blocks", sum(ours_wall), sum(bare_wall), n),
                ("best block", min(ours_wall), min(bare_wall), size),
            ):
                print(
                    f"  {label}: Touch.enqueue {ours_s / calls * 1e6:6.1f} us a call "
                    f"({calls / ours_s:,.0f}/s); bare LPUSH (RPUSH) {bare_s / calls * 1e6:6.1f} "
                    f"us ({calls / bare_s:,.0f}/s): enqueue = {bare_s / ours_s:.2f}x of it"
                )
            ours_us, bare_us_cpu = min(ours_cpu) / size * 1e6, min(bare_cpu) / size * 1e6
            print(
                f"  this process's CPU (best block; the machine's load moves it least): "
                f"Touch.enqueue {ours_us:.1f} us a call, RPUSH {bare_us_cpu:.1f} us, "
                f"+{ours_us - bare_us_cpu:.1f} us"
            )
            script_us = evalsha[1] / evalsha[0]
            bare_us = rpush_us / rpush_calls
            print(
                f"  inside Redis: the enqueue script {script_us:.1f} us a call (its "
                f"{sum(c for c, _ in inner.values()) / n + 1:.0f} commands), a bare LPUSH "
                f"{bare_us:.1f} us"
            )
            extra = (min(ours_wall) - min(bare_wall)) / size * 1e6
            print(
                f"  over the floor (best blocks): {extra:.1f} us a call, of which the script's "
                f"extra time in Redis {script_us - bare_us:.1f} us; the rest, "
                f"{extra - (script_us - bare_us):.1f} us, is Python in this process (its CPU: "
                f"+{ours_us - bare_us_cpu:.1f} us)"
            )
            profiler = cProfile.Profile()
            profiler.enable()
            for i in range(n):
                Touch.enqueue(Number(i))
            profiler.disable()
            report_profile(profiler, n)


def alternate(runs: list[Any]) -> list[tuple[list[float], list[float]]]:
    """Run each callable once per block, in turn, BLOCKS times: the wall and the CPU seconds
    (this process's, time.process_time) of each run's blocks."""
    times: list[tuple[list[float], list[float]]] = [([], []) for _ in runs]
    for _ in range(BLOCKS):
        for run, (wall, cpu) in zip(runs, times, strict=True):
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return times


def report_profile(profiler: cProfile.Profile, n: int) -> None:
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in raw.values())
    by_where: collections.Counter[str] = collections.Counter()
    own: list[tuple[float, str, int]] = []
    for (filename, line, func), (_, calls, tt, _ct, _) in raw.items():
        if filename == "~":  # a builtin: socket calls, json's C encoder, ...
            label = (
                "socket"
                if any(s in func for s in ("recv", "send", "poll", "select"))
                else "builtins"
            )
        else:
            label = where(filename)
        by_where[label] += tt
        if "django_jobs" in filename:
            short = filename.split("django_jobs/")[-1]
            own.append((tt, f"{short}:{line} {func}", calls))
    print(f"  under cProfile (which slows Python calls), {total / n * 1e6:.1f} us a call:")
    print(
        "    "
        + ", ".join(
            f"{k} {v / n * 1e6:.1f} us ({v / total:.0%})" for k, v in by_where.most_common()
        )
    )
    print("    django_jobs' functions by own time (us a call, calls a call):")
    for tt, name, calls in sorted(own, reverse=True)[:12]:
        print(f"      {tt / n * 1e6:5.1f}  {calls / n:4.1f}  {name}")


# The drain


def proc_stat(pid: int) -> tuple[int, int, int]:
    """(CPU ticks, voluntary, nonvoluntary context switches) of pid (0s when gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rfind(")") + 2 :].split()
        ticks = int(fields[11]) + int(fields[12])
        vol = nonvol = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    nonvol = int(line.split()[1])
        return ticks, vol, nonvol
    except OSError:
        return 0, 0, 0


def redis_pid(probe: redis.Redis) -> int:
    return int(probe.info("server")["process_id"])


def snapshot(pids: dict[str, list[int]]) -> dict[str, tuple[int, int, int]]:
    out = {}
    for role, members in pids.items():
        stats = [proc_stat(p) for p in members]
        out[role] = (sum(s[0] for s in stats), sum(s[1] for s in stats), sum(s[2] for s in stats))
    return out


def done(counter: redis.Redis, namespace: str) -> int:
    """probes.Touch's count, read with GETRANGE: a command nothing else sends, left out below."""
    return int(counter.getrange(f"{namespace}:probe:touched", 0, -1) or 0)


def drain_profile(count: int, py_spy: str | None) -> None:
    from bench.peers import ours
    from django_jobs.client import get_broker  # noqa: F401  (django set up)

    with private_redis() as url, tempfile.TemporaryDirectory() as tmp:
        probe = redis.Redis.from_url(url)
        counter = redis.Redis.from_url(url, db=1)
        spy_seconds = 1
        for sample in [False, True] if py_spy else [False]:
            namespace = f"bench-{uuid.uuid4().hex[:8]}"
            ctx = Context("ours", "django-jobs", url, sys.executable, f"profile-{namespace}",
                          concurrency=10)  # fmt: skip
            ctx.env = ours.environment(url, Path(tmp), namespace, {})
            fill(ctx, count)
            before_cmds = usec(probe)
            worker = Worker(ctx, Path(tmp) / f"{namespace}.log", sample_rss=False)
            try:
                pid = worker.pid
                wait_until("ten children", lambda: len(tree(pid)) >= 11, 60)  # noqa: B023
                while done(counter, namespace) == 0:
                    worker.check()
                    time.sleep(0.002)
                members = sorted(tree(worker.pid) - {worker.pid})
                pids = {"supervisor": [worker.pid], "children": members,
                        "redis-server": [redis_pid(probe)]}  # fmt: skip
                first, t0, snap0 = done(counter, namespace), time.perf_counter(), snapshot(pids)
                spies = (
                    start_spies(py_spy, worker.pid, members[0], Path(tmp), spy_seconds)
                    if sample
                    else []
                )
                polls = 0
                while (finished := done(counter, namespace)) < count:
                    polls += 1
                    worker.check()
                    time.sleep(0.01)
                seconds, snap1 = time.perf_counter() - t0, snapshot(pids)
                after_cmds = usec(probe)
            finally:
                worker.stop()
            jobs = finished - first
            spy_seconds = max(1, int(seconds * 0.8))  # the sampled drain: inside its span
            if sample:
                report_spies(spies)
                continue
            print(f"\nDrain, runworker --concurrency 10, {jobs:,} Touch jobs measured:")
            print(f"  {jobs / seconds:,.0f} jobs/s over {seconds:.2f} s")
            for role in pids:
                ticks = snap1[role][0] - snap0[role][0]
                vol = snap1[role][1] - snap0[role][1]
                nonvol = snap1[role][2] - snap0[role][2]
                print(
                    f"  {role:<12} CPU {ticks / HZ / jobs * 1e6:6.1f} us a job; context switches "
                    f"{vol / jobs:.2f} voluntary + {nonvol / jobs:.2f} forced a job"
                )
            cores = os.cpu_count() or 1
            cpu = sum(snap1[r][0] - snap0[r][0] for r in pids) / HZ
            print(
                f"  all three: {cpu / jobs * 1e6:.1f} us of CPU a job; {cores} cores at 100% "
                f"would drain {jobs * cores / cpu:,.0f} jobs/s; used {cpu / seconds / cores:.0%} "
                f"of the machine"
            )
            report_commands(usec_delta(before_cmds, after_cmds), count, polls)


def report_commands(delta: dict[str, tuple[int, int]], jobs: int, polls: int) -> None:
    """Commands and Redis microseconds per job, the whole worker's (start-up included)."""
    delta.pop("getrange", None)  # the polls
    total_calls = sum(c for c, _ in delta.values())
    total_us = sum(u for _, u in delta.values())
    print(
        f"  Redis, per job over the worker's life (start-up included; its polls left out): "
        f"{total_calls / jobs:.2f} commands, {total_us / jobs:.1f} us inside commands"
    )
    rows = sorted(delta.items(), key=lambda kv: -kv[1][1])
    print("    " + ", ".join(f"{k} {c / jobs:.2f}x {u / jobs:.1f} us" for k, (c, u) in rows[:14]))


def start_spies(
    py_spy: str | None, supervisor: int, child: int, tmp: Path, seconds: int
) -> list[Any]:
    spies = []
    for role, pid in (("supervisor", supervisor), ("a child", child)):
        out = tmp / f"spy-{pid}.txt"
        command = [py_spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "250",
                   "--format", "raw", "--nonblocking", "--output", str(out)]  # fmt: skip
        spies.append((role, out, subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL)))  # fmt: skip
    return spies


FRAME = re.compile(r"^(.*) \((.*?):(\d+)\)$")


def frame_name(frame: str) -> str:
    """py-spy's "func (path/to/file.py:12)" as "func file.py:12"."""
    match = FRAME.match(frame.strip())
    return f"{match[1]} {Path(match[2]).name}:{match[3]}" if match else frame.strip()


def report_spies(spies: list[Any]) -> None:
    for role, out, process in spies:
        process.wait(timeout=60)
        own: collections.Counter[str] = collections.Counter()
        total: collections.Counter[str] = collections.Counter()
        samples = 0
        for line in out.read_text(errors="replace").splitlines() if out.exists() else []:
            stack, _, n = line.rpartition(" ")
            frames = [
                f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")") for f in stack.split(";")
            ]
            weight = int(n)
            samples += weight
            own[frames[-1]] += weight
            for frame in set(frames):
                total[frame] += weight
        if not samples:
            print(f"  py-spy: no samples of {role}")
            continue
        print(f"\n  py-spy, {role}: {samples} samples; by own time:")
        for frame, n in own.most_common(10):
            print(f"    {n / samples:5.1%}  {frame}")
        print(
            "   by total time (the frame or what it called; the trunk every sample is in left out):"
        )
        branches = [(f, n) for f, n in total.most_common() if n < 0.95 * samples]
        for frame, n in branches[:14]:
            print(f"    {n / samples:5.1%}  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="N=3000")
    parser.add_argument("--py-spy", help="the py-spy binary (default: on PATH)")
    parser.add_argument("--no-enqueue", action="store_true", help="the drain only")
    parser.add_argument("--no-drain", action="store_true", help="the enqueue only")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    count = 3000 if args.quick else 20_000
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}")
    if not args.no_enqueue:
        enqueue_profile(count)
    if not args.no_drain:
        drain_profile(count, args.py_spy or shutil.which("py-spy"))


if __name__ == "__main__":
    main()
