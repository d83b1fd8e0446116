"""The worker's scrape sums its children's files (prometheus_client's multiprocess mode) and
survives a file a child has only just created: MmapedDict opens (creates) it empty and only
then grows it to its first size, and a scrape in between read no header (CI: the worker's
/metrics answered 500 in tests/acceptance/test_metrics_worker.py, 2 runs of 3 under load)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from django_jobs.metrics.worker import ChildrenCollector
from tests.metrics_scrape import samples, value


def child_file(directory: Path, pid: int, completed: float) -> None:
    """A child's counter file, as prometheus_client writes it: django_jobs_completed_total."""
    values = MmapedDict(str(directory / f"counter_{pid}.db"))
    name = "django_jobs_completed"
    key = mmap_key(name, f"{name}_total", ["job", "queue"], ["probes.Touch", "default"], "Runs.")
    values.write_value(key, completed, 0.0)
    values.close()


def test_children_collector__sums_every_childs_file(tmp_path: Path) -> None:
    # Given two children's files
    child_file(tmp_path, 101, 3)
    child_file(tmp_path, 102, 4)
    registry = CollectorRegistry()
    registry.register(ChildrenCollector(str(tmp_path)))

    # Then a scrape reads their sum
    scraped = samples(generate_latest(registry).decode())
    labels = {"job": "probes.Touch", "queue": "default"}
    assert value(scraped, "django_jobs_completed_total", **labels) == 7


def test_children_collector__a_file_a_child_has_only_just_created_is_left_for_the_next_scrape(
    tmp_path: Path,
) -> None:
    # Given a child's figures, and the file of a child forked a moment ago: created, still empty
    child_file(tmp_path, 101, 3)
    (tmp_path / "histogram_102.db").touch()
    registry = CollectorRegistry()
    registry.register(ChildrenCollector(str(tmp_path)))

    # Then the scrape answers, with the figures there are
    scraped = samples(generate_latest(registry).decode())
    labels = {"job": "probes.Touch", "queue": "default"}
    assert value(scraped, "django_jobs_completed_total", **labels) == 3
