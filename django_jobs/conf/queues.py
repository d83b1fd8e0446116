"""JOBS["QUEUES"]: a list of names in priority order, or a mapping of name to options in that
order (`{"default": {"shards": 8}}`: broker/shards.py), and its checks (E005, E051); with the
check error every JOBS check builds, and the rule for names inside Redis keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.checks import Error

from django_jobs.conf.defaults import MAX_SHARDS, QUEUE_OPTIONS

#: Names used inside Redis keys: no braces (hash tags), colons (separators), '#' (a shard's
#: mark, keys.SHARD_MARK) or whitespace.
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def error(id_: int, msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"django_jobs.E{id_:03d}")


def is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(NAME_RE.match(value))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_queues(value: Any) -> list[Error]:
    hint = (
        "Use a list of names in priority order, such as ['critical', 'default', 'low'], or a "
        "mapping of name to options in that order, such as "
        "{'critical': {}, 'default': {'shards': 8}, 'low': {}}."
    )
    names = queue_names(value)
    if not names:
        return [error(5, f"JOBS['QUEUES'] is {value!r}, not a non-empty list of names.", hint)]
    bad = [q for q in names if not is_name(q)]
    if bad:
        return [
            error(
                5,
                f"JOBS['QUEUES'] holds invalid queue names: {bad!r}.",
                "Queue names are letters, digits, '_', '-' or '.' (no ':', '#', '{' or '}').",
            )
        ]
    repeated = sorted({q for q in names if names.count(q) > 1})
    if repeated:
        return [
            error(
                5,
                f"JOBS['QUEUES'] repeats {', '.join(repeated)}.",
                "List each queue once, in priority order.",
            )
        ]
    return _check_queue_options(value) if isinstance(value, Mapping) else []


def queue_names(value: Any) -> list[str]:
    """The queue names of a JOBS["QUEUES"] value (a list of names, or a mapping of name to
    options), in order; [] when it is neither (E005 says so)."""
    if isinstance(value, Mapping):
        return list(value)
    if isinstance(value, str) or not isinstance(value, Sequence):
        return []
    return list(value)


def queue_shards(value: Any) -> dict[str, int]:
    """The shards of each queue of a valid JOBS["QUEUES"] value (1: not sharded)."""
    if not isinstance(value, Mapping):
        return dict.fromkeys(value, 1)
    return {name: options.get("shards", 1) for name, options in value.items()}


def _check_queue_options(queues: Mapping[str, Any]) -> list[Error]:
    """E051: each queue's options in a QUEUES mapping (a dict of QUEUE_OPTIONS)."""
    errors = []
    known = ", ".join(repr(option) for option in QUEUE_OPTIONS)
    for name, options in queues.items():
        if not isinstance(options, Mapping):
            errors.append(
                error(
                    51,
                    f"JOBS['QUEUES'][{name!r}] is {options!r}, not a dict of options.",
                    f"Give each queue a dict of options ({known}), such as {{'shards': 8}}, "
                    "or {} for none.",
                )
            )
            continue
        unknown = sorted(str(key) for key in options if key not in QUEUE_OPTIONS)
        if unknown:
            errors.append(
                error(
                    51,
                    f"JOBS['QUEUES'][{name!r}] has unknown options: {', '.join(unknown)}.",
                    f"A queue takes the options {known}.",
                )
            )
        shards = options.get("shards", 1)
        if not (_is_count(shards) and shards <= MAX_SHARDS):
            errors.append(
                error(
                    51,
                    f"JOBS['QUEUES'][{name!r}]['shards'] is {shards!r}, not a whole number "
                    f"from 1 to {MAX_SHARDS}.",
                    "Give the Redis Cluster slots to split the queue over, such as 8 (about "
                    "twice the masters: docs/scale.rst); 1, or no 'shards', keeps it whole.",
                )
            )
    return errors
