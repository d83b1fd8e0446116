"""The Grafana dashboard in the docs queries only metrics that django-jobs exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "_static" / "grafana-dashboard.json"

#: What the worker's endpoint and the view expose (docs/metrics.rst); histograms and counters
#: by the names PromQL uses.
EXPOSED = {
    "django_jobs_completed_total", "django_jobs_failed_total", "django_jobs_retried_total",
    "django_jobs_dead_total", "django_jobs_crashed_total", "django_jobs_run_seconds_bucket",
    "django_jobs_start_latency_seconds_bucket", "django_jobs_slots_busy",
    "django_jobs_slots_total", "django_jobs_queue_tasks", "django_jobs_queue_paused",
}  # fmt: skip


def test_every_panel_queries_exposed_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    used = {name for e in exprs for name in re.findall(r"django_jobs_\w+", e)}
    assert used <= EXPOSED, used - EXPOSED
    assert {"django_jobs_queue_tasks", "django_jobs_run_seconds_bucket"} <= used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
