"""The tables `python -m bench` prints: the systems at their defaults, then drain and memory at
each concurrency, then the issue's targets as ratios of this run.

Every figure is the median of a system's runs in one setup (its defaults, or a matched
concurrency); enqueue, its LPUSH floor and bulk enqueue do not depend on the worker's setup, so
theirs is the median over all of a system's setups and runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.peers import MATCHED, ROOT, load, setups

#: A setup: None for the system's defaults, else the matched concurrency.
Setup = int | None


@dataclass
class Result:
    """One system in one setup, one run."""

    system: str
    setup: Setup
    concurrency: int  # jobs at once in the worker's tree
    enqueue: float  # jobs/s, one call each
    floor: float  # bare LPUSH calls/s, one at a time, in the same blocks
    enqueue_cmds: float  # per job
    bulk: float | None
    drain: float
    drained_all: bool  # False: the drain cap ended it first
    worker_cmds: float  # per job, the job's own INCR and the harness's polls left out
    pickup_ms: tuple[float, float, float]
    rss: int  # bytes
    pss: int  # bytes
    exit_code: int | None
    others: float  # share of the machine's CPU that other processes used meanwhile
    load: str  # the load average when it started
    odd: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)


def median_of(results: list[Result]) -> dict[str, Any]:
    bulks = [r.bulk for r in results if r.bulk is not None]
    return {
        "concurrency": results[0].concurrency,
        "drain": statistics.median(r.drain for r in results),
        "drained_all": all(r.drained_all for r in results),
        "pickup": [statistics.median(r.pickup_ms[i] for r in results) for i in range(3)],
        "rss": statistics.median(r.rss for r in results) / 2**20,
        "pss": statistics.median(r.pss for r in results) / 2**20,
        "worker_cmds": statistics.median(r.worker_cmds for r in results),
        "bulk": statistics.median(bulks) if bulks else None,
    }


def medians(runs: dict[tuple[str, Setup], list[Result]]) -> dict[str, dict[str, Any]]:
    """Per system: its setups' medians (under "setups", keyed "default" or the concurrency), and
    the medians of enqueue, floor and their ratio over all its runs."""
    out: dict[str, dict[str, Any]] = {}
    for (system, setup), results in runs.items():
        entry = out.setdefault(system, {"setups": {}, "all": []})
        entry["setups"][name(setup)] = median_of(results)
        entry["all"].extend(results)
    for entry in out.values():
        every: list[Result] = entry.pop("all")
        entry["enqueue"] = statistics.median(r.enqueue for r in every)
        entry["floor"] = statistics.median(r.floor for r in every)
        entry["of_floor"] = statistics.median(r.enqueue / r.floor for r in every)
        entry["enq_cmds"] = statistics.median(r.enqueue_cmds for r in every)
        bulks = [r.bulk for r in every if r.bulk is not None]
        entry["bulk"] = statistics.median(bulks) if bulks else None
    return out


def name(setup: Setup) -> str:
    return "default" if setup is None else str(setup)


def lookup(med: dict[str, Any], column: Setup, default_concurrency: int) -> dict[str, Any] | None:
    """A system's medians in a column; a matched column equal to its default is the default's."""
    setups = med["setups"]
    if name(column) in setups:
        return dict(setups[name(column)])
    if column == default_concurrency and "default" in setups:
        return dict(setups["default"])
    return None


def _grid(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _x(text: str, value: float | None, ref: float | None, ours: bool) -> str:
    if ours or value is None or not ref:
        return text
    return f"{text} ({value / ref:.2f}x)"


def defaults_table(
    labels: dict[str, str], med: dict[str, dict[str, Any]], kills: dict[str, str]
) -> list[str]:
    """One row per system at its defaults; each peer figure with its ratio to django-jobs'."""
    head = ("system", "jobs at once", "enqueue jobs/s", "LPUSH/s", "of LPUSH", "bulk jobs/s",
            "drain jobs/s", "pickup ms p50/p95/p99", "RSS MiB", "PSS MiB", "cmds/job enq+worker",
            "kill -9: runs again")  # fmt: skip
    rows = [head]
    base = med.get("ours")
    bd = base["setups"]["default"] if base else {}
    for system, m in med.items():
        d, ours = m["setups"]["default"], system == "ours"
        p50, p95, p99 = d["pickup"]
        cmds = m["enq_cmds"] + d["worker_cmds"]
        base_cmds = base["enq_cmds"] + bd["worker_cmds"] if base else None
        drain = f"{d['drain']:,.0f}" + ("" if d["drained_all"] else "*")
        rows.append((
            labels[system], str(d["concurrency"]),
            _x(f"{m['enqueue']:,.0f}", m["enqueue"], base and base["enqueue"], ours),
            f"{m['floor']:,.0f}", f"{m['of_floor']:.2f}",
            _x(f"{m['bulk']:,.0f}", m["bulk"], base and base["bulk"], ours) if m["bulk"] else "—",
            _x(drain, d["drain"], bd.get("drain"), ours),
            _x(f"{p50:.1f}/{p95:.1f}/{p99:.1f}", p99, (bd.get("pickup") or [0, 0, 0])[2], ours),
            _x(f"{d['rss']:.0f}", d["rss"], bd.get("rss"), ours),
            _x(f"{d['pss']:.0f}", d["pss"], bd.get("pss"), ours),
            _x(f"{m['enq_cmds']:.1f}+{d['worker_cmds']:.1f}", cmds, base_cmds, ours),
            kills.get(system, "—"),
        ))  # fmt: skip
    return _grid(rows)


def by_concurrency(
    labels: dict[str, str], med: dict[str, dict[str, Any]], defaults: dict[str, int], what: str
) -> list[str]:
    """Per system, `what` ("drain", or "pss" per job slot) at its defaults and each matched
    concurrency; drain with its ratio to django-jobs' in the same column."""
    columns: list[Setup] = [None, *MATCHED]
    head = ("system", "defaults", *(f"{c} at once" for c in MATCHED))
    rows = [head]
    base = med.get("ours")
    for system, m in med.items():
        cells = [labels[system]]
        for column in columns:
            cell = lookup(m, column, defaults[system])
            ref = lookup(base, column, defaults["ours"]) if base else None
            if cell is None:
                cells.append("—")
            elif what == "drain":
                text = f"{cell['drain']:,.0f}" + ("" if cell["drained_all"] else "*")
                if column is None:
                    text += f" ({cell['concurrency']})"
                    if ref and system != "ours":
                        text += f" {cell['drain'] / ref['drain']:.2f}x"
                    cells.append(text)
                else:
                    cells.append(_x(text, cell["drain"], ref and ref["drain"], system == "ours"))
            else:
                per_slot = cell["pss"] / cell["concurrency"]
                cells.append(f"{per_slot:.1f} ({cell['pss']:.0f}/{cell['concurrency']})")
        rows.append(tuple(cells))
    return _grid(rows)


def targets(
    labels: dict[str, str], med: dict[str, dict[str, Any]], defaults: dict[str, int]
) -> list[str]:
    """The issue's targets, each as the ratio this run measured."""
    if "ours" not in med or len(med) < 2:
        return []
    ours, peers = med["ours"], {s: m for s, m in med.items() if s != "ours"}
    lines = []
    for column in [None, *MATCHED]:
        mine = lookup(ours, column, defaults["ours"])
        theirs = {s: c for s, m in peers.items() if (c := lookup(m, column, defaults[s]))}
        if mine is None or not theirs:
            continue
        best = max(theirs, key=lambda s: theirs[s]["drain"])
        where = "each at its defaults" if column is None else f"{column} at once"
        ratio = mine["drain"] / theirs[best]["drain"]
        lines.append(
            f"drain, {where}: django-jobs {mine['drain']:,.0f}/s, fastest peer {labels[best]} "
            f"{theirs[best]['drain']:,.0f}/s: {ratio:.2f}x (target 2x: "
            f"{'met' if ratio >= 2 else 'not met'})"
        )
    fastest = max(peers, key=lambda s: peers[s]["enqueue"])
    lines.append(
        f"single enqueue: django-jobs {ours['enqueue']:,.0f}/s = {ours['of_floor']:.2f}x of a bare "
        f"LPUSH ({ours['floor']:,.0f}/s) (target 0.9x: "
        f"{'met' if ours['of_floor'] >= 0.9 else 'not met'}); fastest peer {labels[fastest]} "
        f"{peers[fastest]['enqueue']:,.0f}/s ({peers[fastest]['of_floor']:.2f}x of its LPUSH): "
        f"django-jobs {ours['enqueue'] / peers[fastest]['enqueue']:.2f}x of it"
    )
    p99 = ours["setups"]["default"]["pickup"][2]
    best_p = min(peers, key=lambda s: peers[s]["setups"]["default"]["pickup"][2])
    their = peers[best_p]["setups"]["default"]["pickup"][2]
    lines.append(
        f"idle pickup p99: django-jobs {p99:.2f} ms, best peer {labels[best_p]} {their:.2f} ms "
        f"(targets <= best peer: {'met' if p99 <= their else 'not met'}; < 2 ms: "
        f"{'met' if p99 < 2 else 'not met'})"
    )
    if "celery" in med:
        mine = lookup(ours, 10, defaults["ours"])
        cel = lookup(med["celery"], 10, defaults["celery"])
        if mine and cel:
            a, b = mine["pss"] / 10, cel["pss"] / 10
            lines.append(
                f"worker PSS per slot at 10 at once: django-jobs {a:.1f} MiB, Celery prefork "
                f"{b:.1f} MiB: {a / b:.2f}x (target <= 1: {'met' if a <= b else 'not met'}); "
                f"RSS {mine['rss']:.0f} vs {cel['rss']:.0f} MiB"
            )
    return lines


def revision() -> str:
    """The commit of the checkout, and whether django_jobs/ differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()  # fmt: skip

    try:
        commit, dirty = (
            git("rev-parse", "--short", "HEAD"),
            git("status", "--porcelain", "django_jobs"),
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return commit + (" with uncommitted changes in django_jobs/" if dirty else "")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return {
        "cores": str(os.cpu_count()),
        "memory": f"{int(mem[1]) / 2**20:.1f} GiB" if mem else "?",
        "cpu": model[1].strip() if model else platform.processor() or "?",
        "kernel": f"{platform.system()} {platform.release()}",
    }


def fmt_kill(seconds: float | str | None, cap: float) -> str:
    if isinstance(seconds, str):
        return seconds
    return f"never (>{cap:g} s)" if seconds is None else f"{seconds:.1f} s"


def notes(labels: dict[str, str], runs: dict[tuple[str, Setup], list[Result]]) -> list[str]:
    """Exit codes other than 0, and the first worker log lines of each kind that look wrong."""
    lines = []
    for system in labels:
        results = [r for (s, _), rs in runs.items() if s == system for r in rs]
        codes = {r.exit_code for r in results}
        if codes != {0}:
            lines.append(f"  {labels[system]}: exit codes on SIGTERM {sorted(codes, key=str)}")
        seen: set[str] = set()
        for line in (line for r in results for line in r.odd):
            shape = re.sub(r"\d+", "#", line)
            if shape not in seen and len(seen) < 5:
                seen.add(shape)
                lines.append(f"  {labels[system]}: {line[:160]}")
    return lines


def report(
    args: argparse.Namespace, sizes: Any, systems: list[str], runs: dict[tuple[str, Setup],
    list[Result]], kills: dict[str, float | str | None], lease: dict[str, float],
    redis_version: str, seconds: float, loads: tuple[str, str],
) -> None:  # fmt: skip
    labels = {s: load_title(s) for s in systems}
    defaults = {s: load(s).default_concurrency() for s in systems}
    cells = {name: fmt_kill(value, sizes.cap) for name, value in kills.items()}
    short = ", ".join(f"{k}={v:g}" for k, v in lease.items())
    if "ours-short" in cells:
        cells["ours-short"] += f" ({short})"
        if args.quick:
            cells["ours"] = cells["ours-short"]
    med = medians(runs)
    info = machine()
    command = " ".join(["python -m bench", *sys.argv[1:]])
    versions = {s: next(r for (x, _), rs in runs.items() if x == s for r in rs).versions
                for s in systems}  # fmt: skip
    print(
        f"{command}: N={sizes.jobs} jobs, M={sizes.pickups} pickups, medians of "
        f"{sizes.runs} run(s), drain cap {sizes.drain_cap:g} s, {seconds:.0f} s in all"
    )
    print(
        f"machine: {info['cores']} cores, {info['memory']}, {info['cpu']}, {info['kernel']}; "
        f"Redis {redis_version} (private, no persistence)"
    )
    print(f"django-jobs at {revision()}; load average before {loads[0]}, after {loads[1]}")
    print("\nEach system at its defaults:\n")
    print("\n".join(defaults_table(labels, med, cells)))
    print()
    print("x: ratio to django-jobs in this run (for jobs/s, above 1 is faster than django-jobs;")
    print("   for pickup p99, memory and commands, above 1 is more). — : no bulk API.")
    print("of LPUSH: enqueue jobs/s over bare redis-py LPUSH calls/s, measured in the same blocks.")
    print("*: the drain was still going at the cap; jobs/s up to then.")
    if sizes.matched:
        print("\nDrain jobs/s, at the defaults (jobs at once) and at matched concurrency:\n")
        print("\n".join(by_concurrency(labels, med, defaults, "drain")))
        print("\nWorker PSS MiB per job slot (the tree's peak PSS / jobs at once):\n")
        print("\n".join(by_concurrency(labels, med, defaults, "pss")))
    if lines := targets(labels, med, defaults):
        print("\nTargets (issue 22), this run:")
        print("\n".join(f"  {line}" for line in lines))
    if "ours-short" in cells and not args.quick:
        print(f"django-jobs kill -9 with a short lease: {cells['ours-short']}")
    print("How each worker runs (one process tree each):")
    for system in systems:
        for setup in setups(system) if sizes.matched else [None]:
            print(f"  {labels[system]:<12} {load(system).how(setup)}")
    print("Versions:")
    for system in systems:
        print(
            f"  {labels[system]:<12} " + ", ".join(f"{k} {v}" for k, v in versions[system].items())
        )
    print("CPU used by other processes, and the load average, at each setup's run:")
    for (system, setup), rs in runs.items():
        where = "defaults" if setup is None else f"{setup} at once"
        print(
            f"  {labels[system]}, {where}: " + "; ".join(f"{r.others:.0%} ({r.load})" for r in rs)
        )
    commits = {r.versions["commit"] for (s, _), rs in runs.items() if s == "ours" for r in rs}
    if len(commits) > 1:
        print(f"WARNING: django-jobs changed between runs: {', '.join(sorted(commits))}")
    if odd := notes(labels, runs):
        print("Worker warnings and errors (first of each kind):")
        print("\n".join(odd))
    if args.json:
        data = {
            "command": command, "machine": info, "revision": revision(), "load": list(loads),
            "redis": redis_version, "sizes": asdict(sizes), "versions": versions,
            "labels": labels, "defaults": defaults,
            "runs": [asdict(r) for rs in runs.values() for r in rs],
            "medians": med, "kill9": kills, "seconds": seconds,
        }  # fmt: skip
        args.json.write_text(json.dumps(data, indent=2))


def load_title(system: str) -> str:
    return str(load(system).TITLE)
