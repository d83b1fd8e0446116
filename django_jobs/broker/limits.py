"""Limits per job type: at most N of its tasks running at once (`Job.concurrency_limit`) and at
most R starts per period (`Job.rate_limit = "100/m"`), held by the dequeue script across every
worker (see dequeue.lua for how, and docs/jobs.rst, "Limits").

A worker passes the limits of the job types it knows into each dequeue (`dequeue_args`); one
whose job types have none passes nothing, and its dequeue costs what it did before limits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: The periods a rate may be given per, in seconds.
PERIODS = {"s": 1, "m": 60, "h": 3600}
_RATE = re.compile(r"\s*(\d+)\s*/\s*([a-z]+)\s*")
#: What a limited job's name may not hold: the dequeue script reads the name from the task's
#: message (JSON) unescaped.
_ESCAPED = re.compile(r'["\\\x00-\x1f]')


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` starts in each window of `period` seconds."""

    count: int
    period: int

    @classmethod
    def parse(cls, text: str) -> Rate:
        """Read "<count>/<s|m|h>" ("100/m"); ValueError saying how to write it otherwise."""
        match = _RATE.fullmatch(text)
        if match is None or match[2] not in PERIODS or int(match[1]) < 1:
            raise ValueError(
                f"rate_limit {text!r} is not a rate: write '<count>/<period>' with a count of 1 "
                f"or more and a period of s, m or h, e.g. '100/m' (at most 100 starts a minute)"
            )
        return cls(int(match[1]), PERIODS[match[2]])


@dataclass(frozen=True, slots=True)
class Limit:
    """The limits of one job type (a concurrency of 0: no cap; a rate of None: none)."""

    job: str
    concurrency: int
    rate: Rate | None


def limit(job: str, concurrency_limit: object, rate_limit: object) -> Limit | None:
    """The limits of job type `job` from its class attributes (None: it has none); raise
    TypeError or ValueError naming the attribute and what to write instead."""
    if concurrency_limit is None and rate_limit is None:
        return None
    concurrency = 0
    if concurrency_limit is not None:
        if not isinstance(concurrency_limit, int) or isinstance(concurrency_limit, bool):
            raise TypeError(
                f"{job}: concurrency_limit must be a whole number of tasks (or None for no "
                f"limit), not {concurrency_limit!r}"
            )
        if concurrency_limit < 1:
            raise ValueError(
                f"{job}: concurrency_limit must be 1 or more (None for no limit), not "
                f"{concurrency_limit}"
            )
        concurrency = concurrency_limit
    rate = None
    if rate_limit is not None:
        if not isinstance(rate_limit, str):
            raise TypeError(f"{job}: rate_limit must be a string like '100/m', not {rate_limit!r}")
        try:
            rate = Rate.parse(rate_limit)
        except ValueError as exc:
            raise ValueError(f"{job}: {exc}") from None
    if _ESCAPED.search(job):
        raise ValueError(
            f"job name {job!r}: a job with a concurrency_limit or rate_limit needs a name without "
            f"quotes, backslashes or control characters (set `name` on the class)"
        )
    return Limit(job, concurrency, rate)


def dequeue_args(limits: Iterable[Limit]) -> list[str | int]:
    """The limits as the dequeue script takes them after its queues' prefixes (dequeue.lua)."""
    args: list[str | int] = []
    for each in limits:
        rate = each.rate
        args += [each.job, each.concurrency, rate.count if rate else 0, rate.period if rate else 1]
    return args
