"""Read Prometheus' text exposition format into {(name, labels): value} for the metrics tests.

A sample the exposition lacks is not 0: `value` fails on it, so that a test asserting 0 fails when
the metric is not exported at all. `sample` reads it as None (for polls, and for checking that
there is none); `counter` reads a counter's missing child as 0 once the counter is exported.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Scraped = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Scraped:
    """Every sample of an exposition, keyed by its name and its labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(scraped: Scraped, name: str, **labels: str) -> float | None:
    """One sample's value, or None when the exposition has no such sample."""
    return scraped.get((name, frozenset(labels.items())))


def value(scraped: Scraped, name: str, **labels: str) -> float:
    """One sample's value; AssertionError when the exposition has no such sample."""
    found = sample(scraped, name, **labels)
    if found is None:
        named = sorted(str(dict(key)) for n, key in scraped if n == name)
        raise AssertionError(f"no sample {name} {labels} (the samples of {name}: {named})")
    return found


def counter(scraped: Scraped, name: str, **labels: str) -> float:
    """A counter's value for these labels, 0 when it has no such child (a child is made at its
    first increment); AssertionError when no sample of `name` is exported at all."""
    if not any(n == name for n, _ in scraped):
        raise AssertionError(f"no sample {name} exported at all")
    return sample(scraped, name, **labels) or 0.0
