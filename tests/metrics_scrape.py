"""Read Prometheus' text exposition format into {(name, labels): value} for the metrics tests."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, keyed by its name and its labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:  # fmt: skip
    """One sample's value (0 when the exposition has no such sample)."""
    return scraped.get((name, frozenset(labels.items())), 0.0)
