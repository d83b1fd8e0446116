"""ctx.start_child: awaited or not, the parent/child links on get_run, and the cancel policy
(canceling a parent cancels every child it started)."""

from __future__ import annotations

import pytest

from django_jobs.conf import get_settings
from django_jobs.flows import cancel, get_run
from django_jobs.flows.base import CALL_ID_RE
from django_jobs.flows.children import child_call_id
from django_jobs.flows.details import get_run_detail
from django_jobs.flows.events import publish
from django_jobs.testing import run_burst
from testproject.shop.flows import NapFlow
from testproject.shop.people import Family, Parent
from tests.conftest import RedisNamespace, wait_until


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def status(call: str) -> str:
    run = get_run(call)
    return run.status if run else "gone"


def test_children__awaited_outputs_come_back_and_the_links_are_on_both_runs(
    redis_ns: RedisNamespace,
) -> None:
    parent = Parent.start(Family(nap=0.05))
    wait_until(lambda: drain() or status(parent) == "succeeded", timeout=10)
    wait_until(lambda: drain() or status(f"{parent}.bg") == "succeeded", timeout=10)
    publish(parent, Parent.name)  # a duplicate event starts no child again
    drain()

    run = get_run(parent)
    assert run is not None
    assert run.output == {
        "steps": ["s0-done", "s1-done"], "detached": f"{parent}.bg", "nap": ["before-done",
                                                                            "after-done"],
    }  # fmt: skip
    assert run.children == [f"{parent}.bg", f"{parent}.nap", f"{parent}.steps"]
    assert run.parent == ""
    for child in run.children:
        child_run = get_run(child)
        assert child_run is not None
        assert child_run.parent == parent
        assert child_run.status == "succeeded"
    states = {s.name: s.state for s in run.steps if s.kind == "child"}
    assert states == {"steps": "succeeded", "bg": "started", "nap": "succeeded"}  # bg: detached
    detail = get_run_detail(f"{parent}.steps")
    assert detail is not None
    assert detail.parent == parent
    assert get_run_detail(parent).children == run.children  # type: ignore[union-attr]


def test_children__canceling_the_parent_cancels_its_children(redis_ns: RedisNamespace) -> None:
    parent = Parent.start(Family(nap=60))
    wait_until(lambda: drain() or status(f"{parent}.nap") == "sleeping", timeout=10)
    assert status(parent) == "waiting"
    assert status(f"{parent}.bg") == "sleeping"  # not awaited: canceled all the same

    assert cancel(parent, "order withdrawn") is True
    drain()
    assert status(parent) == "canceled"
    for child in ("steps", "bg", "nap"):
        run = get_run(f"{parent}.{child}")
        assert run is not None
        expected = "succeeded" if child == "steps" else "canceled"  # steps had ended
        assert run.status == expected, (child, run.status)
    assert "order withdrawn" in get_run(f"{parent}.nap").error  # type: ignore[union-attr]


def test_children__a_child_canceled_alone_fails_its_awaiting_parent(
    redis_ns: RedisNamespace,
) -> None:
    parent = Parent.start(Family(nap=60))
    wait_until(lambda: drain() or status(f"{parent}.nap") == "sleeping", timeout=10)
    assert cancel(f"{parent}.nap", "not needed") is True
    wait_until(lambda: drain() or status(parent) == "failed", timeout=10)
    run = get_run(parent)
    assert run is not None
    assert f"child {parent}.nap canceled" in run.error, run.error


def test_children__a_finish_whose_worker_died_before_telling_the_parent_tells_it_later(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_jobs.flows import engine

    parent = Parent.start(Family(nap=0.05))
    wait_until(lambda: drain() or status(f"{parent}.nap") == "sleeping", timeout=10)
    with monkeypatch.context() as patched:
        patched.setattr(engine, "notify_parent", lambda state: None)  # its worker died there
        wait_until(lambda: drain() or status(f"{parent}.nap") == "succeeded", timeout=10)
        drain()
        assert status(parent) == "waiting"

    publish(f"{parent}.nap", NapFlow.name)  # the dead worker's event, delivered again
    wait_until(lambda: drain() or status(parent) == "succeeded", timeout=10)


def test_child_call_id__long_parents_sharing_60_characters_get_distinct_children() -> None:
    a, b = "p" * 60 + "-a" * 18, "p" * 60 + "-b" * 18  # 96 characters, one 60-long prefix
    assert child_call_id("order", "ship") == "order.ship"
    ids = {child_call_id(parent, "step") for parent in (a, b)}
    assert len(ids) == 2  # red before: both were <parent[:60]>.<sha(name)>
    assert all(CALL_ID_RE.match(i) for i in ids)
    assert child_call_id(a, "step") == child_call_id(a, "step")
