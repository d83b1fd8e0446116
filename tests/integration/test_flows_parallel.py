"""ctx.parallel across a worker's death: an item spent for good is never run again."""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs.broker.factory import get_broker
from django_jobs.broker.flows import FlowStore
from django_jobs.conf import get_settings
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.flows import Context, Flow, get_run
from django_jobs.flows.events import publish
from django_jobs.testing import run_burst
from testproject.shop.flows import Steps
from tests.conftest import RedisNamespace

#: Each run of Fan's failing item.
RUNS: list[int] = []


def fails(n: int) -> None:
    RUNS.append(n)
    raise RuntimeError("for good")


class Fan(Flow[Steps]):
    def run(self, ctx: Context, input: Steps) -> Any:
        return ctx.parallel("fan", [(fails, input.n)], max_attempts=1)


def test_parallel__an_item_failed_for_good_before_its_group_is_not_run_again(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    RUNS.clear()
    real = Context.write

    def dies_before_the_group_fails(self: Context, *args: Any, **kwargs: Any) -> str:
        group = (kwargs.get("status") or {}).get("parallel:fan") or {}
        if group.get("state") == "failed":  # the worker dies between the item and its group
            raise BrokerUnavailable("the worker died here")
        return real(self, *args, **kwargs)

    call = Fan.start(Steps(n=1))
    with monkeypatch.context() as patched:
        patched.setattr(Context, "write", dies_before_the_group_fails)
        run_burst(list(get_settings().flow_queues))
    assert RUNS == [1]
    redis_ns.client.delete(FlowStore(get_broker()).keys.lease(call))  # its lease expires
    publish(call, Fan.name)  # the next event
    run_burst([get_settings().flow_queues[0]])
    run = get_run(call)
    assert run is not None
    assert run.status == "failed"
    assert "item 0: RuntimeError: for good" in run.error
    assert RUNS == [1]  # red before: [1, 1], once more than max_attempts
