"""Job.concurrency_limit and Job.rate_limit are read, and refused with what to write, when the job
class is defined (issue 21)."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import pytest

from django_jobs import Job
from django_jobs.broker.limits import Limit, Rate, dequeue_args, limit


@dataclass(frozen=True)
class Item:
    n: int


@pytest.mark.parametrize(
    ("text", "rate"),
    [("100/m", Rate(100, 60)), ("5/s", Rate(5, 1)), (" 1000 / h ", Rate(1000, 3600))],
)
def test_rate__reads_a_count_per_period(text: str, rate: Rate) -> None:
    assert Rate.parse(text) == rate


@pytest.mark.parametrize("text", ["100", "100/d", "0/m", "-1/s", "1.5/s", "m/100", "100/min", ""])
def test_rate__refuses_anything_else_saying_how_to_write_it(text: str) -> None:
    with pytest.raises(ValueError, match=r"write '<count>/<period>'.*e\.g\. '100/m'"):
        Rate.parse(text)


def test_limit__none_for_a_job_without_limits() -> None:
    assert limit("app.Free", None, None) is None


def test_limit__both_limits_and_their_dequeue_arguments() -> None:
    both = limit("app.Both", 3, "10/s")
    only_rate = limit("app.Rate", None, "2/h")

    assert both == Limit("app.Both", 3, Rate(10, 1))
    assert only_rate == Limit("app.Rate", 0, Rate(2, 3600))
    assert dequeue_args([both, only_rate]) == ["app.Both", 3, 10, 1, "app.Rate", 0, 2, 3600]
    assert dequeue_args([Limit("app.Cap", 2, None)]) == ["app.Cap", 2, 0, 1]


@pytest.mark.parametrize(
    ("attributes", "error", "message"),
    [
        ({"concurrency_limit": 0}, ValueError, "concurrency_limit must be 1 or more"),
        ({"concurrency_limit": "3"}, TypeError, "concurrency_limit must be a whole number"),
        ({"concurrency_limit": True}, TypeError, "concurrency_limit must be a whole number"),
        ({"rate_limit": 100}, TypeError, "rate_limit must be a string like '100/m'"),
        ({"rate_limit": "100/day"}, ValueError, r"limits\.Bad: rate_limit '100/day' is not a rate"),
        (
            {"rate_limit": "1/s", "name": 'limits."Quoted"'},
            ValueError,
            "needs a name without quotes",
        ),
    ],
)
def test_job__a_wrong_limit_is_refused_at_the_class_definition(
    attributes: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        types.new_class(
            "Bad",
            (Job[Item],),
            exec_body=lambda ns: ns.update({"name": "limits.Bad", **attributes}),
        )
