"""Draw the panels of docs/_static/grafana-dashboard.json from a real worker's real metrics.

    PYTHONPATH=. python docs/dashboard_preview.py [--seconds 60] [--output PNG]

Needs the prometheus and bench extras; no Grafana or Prometheus. A private redis-server, the test
project's `runworker --concurrency 4 --metrics-port 0` on queues default and low, a steady mix
of its probes (short Sleeps, Touches; Chaos runs, a fourth raising, retried, some to the dead
state; CrashOnce, killing its child once). Each second, a scrape of the worker's /metrics and
of the queues' view (Django's test Client, a bearer token), with the labels Prometheus adds
under honor_labels: true. Each panel's expressions at each scrape as Prometheus evaluates them
($queue and $job All): rate() the increase per second over the last 4 s ($__rate_interval at
1 s scrapes), not extrapolated to the window's edges; histogram_quantile as its bucketQuantile.
The PNG shows the panels at their gridPos.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import private_redis
from bench.harness import kill_tree, wait_until
from bench.peers.ours import environment

ROOT = Path(__file__).resolve().parents[1]
PNG = "grafana-dashboard-preview.png"
Labels = frozenset[tuple[str, str]]
Scrape = tuple[float, dict[tuple[str, Labels], float]]
urlpatterns: list[Any] = []  # this module is the URLconf of the view's scrapes (main())


def parse(text: str, instance: str, job: str) -> dict[tuple[str, Labels], float]:
    """An exposition's samples with the target's labels; a sample's own win (honor_labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset({"instance": instance, "job": job, **s.labels}.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


class Vec(dict[Labels, float]):
    """An instant vector; + and / match one-to-one on identical label sets, as PromQL's do."""

    def __add__(self, other: Vec) -> Vec:
        return Vec({k: v + other[k] for k, v in self.items() if k in other})

    def __truediv__(self, other: Vec) -> Vec:  # x / 0 left out (Prometheus: NaN or Inf)
        return Vec({k: v / other[k] for k, v in self.items() if other.get(k)})

    def __or__(self, other: Vec) -> Vec:  # PromQL's `or`: the left side, and the rest
        return Vec({**other, **self})

    def __rmul__(self, factor: float) -> Vec:
        return Vec({k: factor * v for k, v in self.items()})


def quantile(q: float, vector: Vec) -> Vec:
    """histogram_quantile: Prometheus' bucketQuantile over each group of le buckets."""
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for labels, count in vector.items():
        le = dict(labels)["le"]  # the bucket's upper bound
        groups.setdefault(labels - {("le", le)}, []).append((float(le), count))
    out = Vec()
    for labels, buckets in groups.items():
        (bounds, counts), rank = zip(*sorted(buckets), strict=True), q * max(c for _, c in buckets)
        ok = rank and bounds[-1] == math.inf  # else NaN, as in Prometheus
        b = next(i for i, count in enumerate(counts) if count >= rank) if ok else -1
        start, below = (bounds[b - 1], counts[b - 1]) if b > 0 else (0.0, 0.0)
        out[labels] = math.nan if b < 0 else bounds[-2] if b == len(bounds) - 1 else (
            start + (bounds[b] - start) * (rank - below) / (counts[b] - below))  # fmt: skip
    return out


def evaluate(expr: str, scrapes: list[Scrape], i: int) -> Vec:
    """The expression at scrape i: its PromQL (the subset the dashboard uses) rewritten into
    calls of the functions below, then evaluated with nothing else in scope."""
    for var, value in (("[$__rate_interval]", ""), ("$queue", ".*"), ("$job", ".*")):
        expr = expr.replace(var, value)
    call = lambda m: f"{m[1] or 'sel('}{m[2]!r}, {m[3] or ''!r}" + ")" * (not m[1])  # noqa: E731
    expr = re.sub(r"(rate\()?(django_jobs_\w+)(\{[^}]*\})?", call, expr)  # rate's ")" stays
    expr = re.sub(r"sum by \(([^)]*)\) \(", lambda m: f"agg({m[1].split(', ')!r}, ", expr)
    expr = expr.replace("sum(", "agg([], ").replace("clamp_min(", "clamp(").replace(" or ", " | ")

    def sel(name: str, matchers: str, j: int = i) -> Vec:  # = and != as anchored regexes too
        found = re.findall(r'(\w+)(=~|!=|!~|=)"([^"]*)"', matchers.replace(" ", ""))
        tests = [(k, o[0] != "!", p if "~" in o else re.escape(p)) for k, o, p in found]
        return Vec({ls: v for (n, ls), v in scrapes[j][1].items() if n == name and all(
            bool(re.fullmatch(p, dict(ls).get(k, ""))) == is_ for k, is_, p in tests)})  # fmt: skip

    def rate(name: str, matchers: str) -> Vec:
        points: dict[Labels, list[tuple[float, float]]] = {}
        for j in range(i + 1):
            if scrapes[j][0] > scrapes[i][0] - 4:  # $__rate_interval: 4 s
                for labels, v in sel(name, matchers, j).items():
                    points.setdefault(labels, []).append((scrapes[j][0], v))
        return Vec({k: sum(b - a if b >= a else b for (_, a), (_, b) in itertools.pairwise(p))
                    / (p[-1][0] - p[0][0]) for k, p in points.items() if len(p) > 1})  # fmt: skip

    def agg(by: list[str], vector: Vec) -> Vec:
        out = Vec()
        for labels, v in vector.items():
            key = frozenset((k, x) for k, x in labels if k in by)
            out[key] = out.get(key, 0.0) + v
        return out

    scope = {"sel": sel, "rate": rate, "agg": agg, "histogram_quantile": quantile,
             "clamp": lambda x, f: Vec({k: max(v, f) for k, v in x.items()})}  # fmt: skip
    return Vec(eval(expr, {"__builtins__": {}}, scope))  # the repo's own dashboard, rewritten


def fmt(v: float, unit: str) -> str:
    if math.isnan(v) or unit in ("short", "ops"):
        return "No data" if math.isnan(v) else f"{v:.3g}" + " ops/s" * (unit == "ops")
    return f"{v:.1%}" if unit == "percentunit" else f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def draw(scrapes: list[Scrape], output: Path, title: str) -> None:
    try:
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise SystemExit('dashboard_preview needs matplotlib: pip install -e ".[bench]"') from None
    grey, muted, green = "#2c3235", "#9fa7b3", "#73bf69"  # and Grafana's classic palette:
    colors = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
              "#705da0", "#508642", "#cca300", "#447ebc", "#c15c17", "#890f02"]  # fmt: skip
    plt.rcParams.update({"axes.facecolor": "#181b1f", "axes.edgecolor": grey, "axes.grid": True,
                         "grid.color": grey, "text.color": "#ccccdc", "xtick.color": muted,
                         "ytick.color": muted, "font.size": 6.5})  # fmt: skip
    panels = json.loads((ROOT / "docs/_static/grafana-dashboard.json").read_text())["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(16, rows * 0.37), dpi=110, facecolor="#111217")
    fig.text(0.004, 0.996, title, fontsize=8.5, va="top", color=muted)
    t0, times = scrapes[0][0], [t - scrapes[0][0] for t, _ in scrapes]
    for panel in panels:
        g, unit, kind = panel["gridPos"], panel["fieldConfig"]["defaults"]["unit"], panel["type"]
        x, w = g["x"] / 24 + 0.002, g["w"] / 24 - 0.004
        y, h = 0.975 * (1 - (g["y"] + g["h"]) / rows) + 0.003, 0.975 * g["h"] / rows - 0.006
        box = fig.add_axes((x, y, w, h), xticks=[], yticks=[])
        box.set_title(panel["title"], loc="left", fontsize=8.5, weight="bold", x=0.01, y=0.86)
        drawn: dict[str, list[float]] = {}  # each legend's value at each scrape, NaN: absent
        for target, i in itertools.product(panel["targets"], range(len(scrapes))):
            legend = target["legendFormat"].replace("{{", "{").replace("}}", "}")
            for labels, v in evaluate(target["expr"], scrapes, i).items():
                drawn.setdefault(legend.format_map(dict(labels)), [math.nan] * len(scrapes))[i] = v
        if kind != "timeseries":  # a stat or the gauge: the last value, as Grafana's defaults
            last = next((v for v in reversed(next(iter(drawn.values()), [])) if v == v), math.nan)
            print(f"{panel['title']} ({kind}): {fmt(last, unit)}")
            box.text(0.5, 0.45, fmt(last, unit), color=green, fontsize=24, ha="center",
                     va="center", weight="bold", transform=box.transAxes)  # fmt: skip
            if kind == "gauge":  # a bar from 0 to 1: Grafana's range for the unit percentunit
                bar = fig.add_axes((x + w * 0.1, y + h * 0.1, w * 0.8, h * 0.1), xlim=(0, 1))
                bar.axis("off"), bar.barh(0, 1, color=grey), bar.barh(0, last, color=green)
            continue
        ax = fig.add_axes((x + w * 0.06, y + h * 0.14, w * 0.58, h * 0.72))
        lit = [k for k, values in sorted(drawn.items()) if any(v for v in values if v == v)]
        palette = {k: colors[n % len(colors)] for n, k in enumerate(lit)}  # the flat ones grey
        lines = {k: ax.plot(times, v, color=palette.get(k, "#5a6069"))[0] for k, v in drawn.items()}
        peaks = [f"{k} max {fmt(max(v for v in drawn[k] if v == v), unit)}" for k in lit]
        flat = f"{len(drawn) - len(lit)} series at 0 throughout" if len(drawn) > len(lit) else ""
        print(f"{panel['title']}: " + "; ".join([*peaks, flat] if flat else peaks or ["No data"]))
        ax.set(xlim=(times[0], times[-1]), ylim=(0, None)), ax.spines[:].set_visible(False)
        ax.yaxis.set_major_formatter(lambda v, _, unit=unit: fmt(v, unit) if v else "0")
        ax.xaxis.set_major_formatter(lambda v, _: time.strftime("%H:%M:%S", time.gmtime(v + t0)))
        if lit:
            ax.legend([lines[k] for k in lit], lit, loc="upper left", bbox_to_anchor=(1.02, 1.08),
                      fontsize=6.3, frameon=False, title=flat and f"(+{flat})",
                      title_fontproperties={"size": 6})  # fmt: skip
        else:  # as Grafana says when no series has a value
            ax.text(0.5, 0.5, "No data", ha="center", fontsize=12, transform=ax.transAxes)
    fig.savefig(output, facecolor=fig.get_facecolor())
    print(f"wrote {output}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="docs/dashboard_preview.py", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--output", type=Path, default=ROOT / "docs/_static/" / PNG)
    args = parser.parse_args()
    with private_redis() as url, tempfile.TemporaryDirectory() as tmp:
        namespace = f"preview-{uuid.uuid4().hex[:8]}"  # CHAOS_LOG_DIR: Chaos' log of its runs
        os.environ.update(environment(url, Path(tmp), namespace, {}), CHAOS_LOG_DIR=tmp)
        import django
        from django.test import Client
        from django.test.utils import override_settings
        from django.urls import include, path

        django.setup()
        from testproject.probes.jobs import Chaos, ChaosWork, CrashOnce, Number, Sleep, Touch, Work

        urlpatterns.append(path("jobs/", include("django_jobs.metrics.urls")))
        log = Path(tmp) / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", "--concurrency", "4",
                 "--metrics-port", "0", "--queues", "default,low", "--shutdown-timeout", "5"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        # (per second, enqueue the n-th): on default, then low (which waits: strict priority)
        kinds: list[tuple[float, Callable[[int, random.Random], object]]] = [
            (10.0, lambda n, r: Sleep.enqueue(Work(f"d{n}", r.uniform(0.02, 0.25)))),
            (1.6, lambda n, r: Chaos.enqueue(ChaosWork(n, 0.05, fail="" if n % 4 else "raise"),
                                             max_attempts=2 if n % 16 == 0 else 5)),
            (0.1, lambda n, r: CrashOnce.enqueue(Work(f"c{n}"))),
            (2.5, lambda n, r: Sleep.enqueue(Work(f"l{n}", r.uniform(0.1, 0.5)), queue="low")),
            (3.0, lambda n, r: Touch.enqueue(Number(n), queue="low"))]  # fmt: skip
        client, token, rng = Client(), uuid.uuid4().hex, random.Random(21)
        sent, scrapes = [0] * len(kinds), list[Scrape]()
        try:
            wait_until("the worker's Metrics on line", lambda: "Metrics on" in log.read_text()
                       or worker.poll() is not None, timeout=60, poll=0.05)  # fmt: skip
            port = re.findall(r"Metrics on http://0\.0\.0\.0:(\d+)/metrics", log.read_text())
            assert port, log.read_text()
            start = time.monotonic()
            with override_settings(ROOT_URLCONF=__name__, JOBS_METRICS_TOKEN=token):
                while len(scrapes) <= args.seconds:
                    elapsed = time.monotonic() - start
                    for k, (rate, send) in enumerate(kinds):
                        while sent[k] <= rate * elapsed:  # the steady rates
                            send(sent[k], rng)
                            sent[k] += 1
                    if elapsed >= len(scrapes):  # the scrapes, one a second
                        where = f"127.0.0.1:{port[0]}"
                        with urllib.request.urlopen(f"http://{where}/metrics") as reply:
                            own = parse(reply.read().decode(), where, "django-jobs-workers")
                        view = client.get("/jobs/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
                        assert view.status_code == 200, view.content
                        queues = parse(view.content.decode(), "web", "django-jobs-queues")
                        scrapes.append((time.time(), {**own, **queues}))
                    time.sleep(0.01)  # the pace of the enqueues, not a wait for an outcome
        finally:
            worker.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout=20)
            kill_tree(worker.pid)
    print(f"{len(scrapes)} scrapes; enqueued of each kind: {sent} ({sum(sent)} in all)")
    draw(scrapes, args.output, f"The panels of docs/_static/grafana-dashboard.json drawn by "
         f"docs/dashboard_preview.py from {len(scrapes)} scrapes (1 s apart) of a real worker, "
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(scrapes[0][0]))}: not a Grafana "
         "screenshot")  # fmt: skip


if __name__ == "__main__":
    main()
