"""The admin's flows pages (runs by status, a run's timeline, cancel, send a signal) with
Django's test client, the real Redis, and flows run in this process (run_burst)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_jobs.conf import get_settings
from django_jobs.flows import Context, Flow, get_run
from django_jobs.testing import run_burst
from testproject.shop.flows import Steps, StepsFlow, Wait, WaitFlow
from tests.conftest import RedisNamespace, free_port
from tests.integration.test_admin import login, make_user, notes, text

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:django_jobs_flowrun_changelist")
HOSTILE = "<script>alert('x')</script>"


@dataclass
class HostileInput:
    label: str = HOSTILE


def explode(label: str) -> None:
    raise RuntimeError(f"boom {label}")


class HostileFlow(Flow[HostileInput]):
    def run(self, ctx: Context, input: HostileInput) -> None:
        ctx.step(f"step {input.label}", explode, input.label, max_attempts=1)


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def run_url(call_id: str, action: str = "change") -> str:
    return reverse(f"admin:django_jobs_flowrun_{action}", args=[call_id])


@pytest.fixture
def staff() -> Client:
    return login(make_user("operator", "view_task", "change_task"))


@pytest.fixture
def viewer() -> Client:
    return login(make_user("viewer", "view_task"))


def listed(response: Any) -> list[str]:
    return re.findall(
        r'class="field-call-id"[^>]*><a href="[^"]+">([^<]+)</a>', response.content.decode()
    )


def test_index__lists_flow_runs_in_the_jobs_section(staff: Client) -> None:
    response = staff.get(reverse("admin:index"))
    assert RUNS in response.content.decode()
    assert "Flow runs" in text(response)


def test_list__by_status_newest_first_with_search_and_paging(
    staff: Client, redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = [StepsFlow.start(Steps(n=1), call_id=f"done-{i}") for i in range(3)]
    waiting = WaitFlow.start(Wait(), call_id="waiting-1")
    drain()

    every = staff.get(RUNS)
    assert every.status_code == 200
    assert listed(every) == [waiting, *reversed(done)]
    assert listed(staff.get(RUNS, {"status": "waiting"})) == [waiting]
    assert f'href="?flow={StepsFlow.name}"' in every.content.decode()  # a flow's runs only
    assert listed(staff.get(RUNS, {"flow": StepsFlow.name})) == list(reversed(done))
    assert listed(staff.get(RUNS, {"status": "succeeded"})) == list(reversed(done))
    assert listed(staff.get(RUNS, {"q": "done-1"})) == ["done-1"]
    assert "No flow run has the call id nope" in text(staff.get(RUNS, {"q": "nope"}))
    assert staff.get(RUNS, {"status": "bogus"}).status_code == 404

    monkeypatch.setattr("django_jobs.admin.flows.PER_PAGE", 2)
    first = staff.get(RUNS)
    assert listed(first) == [waiting, done[2]]
    assert "p=2" in first.content.decode()
    assert listed(staff.get(RUNS, {"p": 2})) == [done[1], done[0]]


def test_run__timeline_signals_and_data(staff: Client, redis_ns: RedisNamespace) -> None:
    call = StepsFlow.start(Steps(n=3), metadata={"user": 7})
    drain()
    response = staff.get(run_url(call))
    assert response.status_code == 200
    page = text(response)
    assert "succeeded" in page
    body = response.content.decode()
    assert re.findall(r'flows-step-name">([^<]+)<', body) == ["s0", "s1", "s2"]
    assert '"user": 7' in text(response)
    assert "s2-done" in page  # the output
    assert "Cancel run" not in page  # finished: nothing to cancel
    assert "Send signal" not in page


def test_run__unknown_call_is_404(staff: Client, redis_ns: RedisNamespace) -> None:
    assert staff.get(run_url("no-such-call")).status_code == 404
    assert staff.post(run_url("no-such-call", "cancel")).status_code == 404
    assert staff.post(run_url("no-such-call", "signal"), {"name": "go"}).status_code == 404


def test_signal__from_the_form_wakes_the_run(staff: Client, redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    page = staff.get(run_url(call))
    assert 'name="name" required value="go"' in page.content.decode()  # the wait it waits on

    bad = staff.post(run_url(call, "signal"), {"name": "go", "value": "{oops"})
    assert bad.status_code == 302
    assert any("is not JSON" in n for n in notes(bad))
    sent = staff.post(run_url(call, "signal"), {"name": "go", "value": '{"amount": 1999}'})
    assert sent.status_code == 302
    assert sent["Location"] == run_url(call)
    assert any("Signal 'go' sent" in n for n in notes(sent))
    drain()
    run = get_run(call)
    assert run is not None
    assert run.output == {"value": {"amount": 1999}, "received": True}
    after = staff.get(run_url(call))
    assert "go" in text(after)
    assert "{&quot;amount&quot;: 1999}" in after.content.decode()


def test_cancel__ends_a_waiting_run(staff: Client, redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert staff.get(run_url(call, "cancel")).status_code == 405
    response = staff.post(run_url(call, "cancel"))
    assert response.status_code == 302
    assert any("is canceled" in n for n in notes(response))
    assert get_run(call).status == "canceled"  # type: ignore[union-attr]
    again = staff.post(run_url(call, "cancel"))
    assert any("already ended" in n for n in notes(again))


def test_changes__need_change_task_and_csrf(viewer: Client, redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert viewer.get(run_url(call)).status_code == 200
    assert "Cancel run" not in text(viewer.get(run_url(call)))
    assert viewer.post(run_url(call, "cancel")).status_code == 403
    assert viewer.post(run_url(call, "signal"), {"name": "go"}).status_code == 403
    csrf = login(make_user("operator", "change_task"), enforce_csrf_checks=True)
    assert csrf.post(run_url(call, "cancel")).status_code == 403
    assert csrf.post(run_url(call, "signal"), {"name": "go"}).status_code == 403
    assert get_run(call).status == "waiting"  # type: ignore[union-attr]
    nobody = login(make_user("nobody"))
    assert nobody.get(RUNS).status_code == 403


def test_hostile_strings_are_escaped(staff: Client, redis_ns: RedisNamespace) -> None:
    call = HostileFlow.start(HostileInput())
    drain()
    assert get_run(call).status == "failed"  # type: ignore[union-attr]
    for url in (run_url(call), RUNS):
        body = staff.get(url).content.decode()
        assert HOSTILE not in body
    body = staff.get(run_url(call)).content.decode()
    assert "&lt;script&gt;" in body


def test_redis_down__pages_say_so_with_503(staff: Client, settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "ENQUEUE_TIMEOUT": 1}
    for url in (RUNS, run_url("abc")):
        response = staff.get(url)
        assert response.status_code == 503, url
        assert "Redis is unreachable" in text(response)
    response = staff.post(run_url("abc", "cancel"))
    assert response.status_code == 302
    assert any("Redis is unreachable" in n for n in notes(response))
    settings.JOBS = {"REDIS_URL": None}
    assert "jobs are disabled" in text(staff.get(RUNS))


def test_run__links_its_parent_and_children(staff: Client, redis_ns: RedisNamespace) -> None:
    from django_jobs.flows.details import RunDetail, get_run_detail

    parent = StepsFlow.start(Steps(n=1), call_id="parent-run")
    child = StepsFlow.start(Steps(n=1), call_id="child-run", metadata={"parent_call_id": parent})
    drain()
    detail = get_run_detail(parent)
    assert detail is not None
    with pytest.MonkeyPatch.context() as mp:
        # The children as ctx.start_child records them (the engine's part); here given.
        linked = RunDetail(detail.run, detail.signals, "", [child])
        mp.setattr("django_jobs.admin.flows.get_run_detail", lambda call_id: linked)
        body = staff.get(run_url(parent)).content.decode()
    assert f'<a href="{run_url(child)}">child-run</a>' in body
    body = staff.get(run_url(child)).content.decode()
    assert f'<a href="{run_url(parent)}">parent-run</a>' in body


@pytest.mark.parametrize("p", ["99999999999999999999", "9" * 400, "-5", "x"])
def test_list__a_page_number_past_every_run_is_an_empty_page(
    staff: Client, redis_ns: RedisNamespace, p: str
) -> None:
    """A hand-edited ?p= answers a page (empty when past the runs), never a 503 blaming Redis."""
    StepsFlow.start(Steps(n=1), call_id="done-1")
    drain()
    response = staff.get(RUNS, {"p": p})
    assert response.status_code == 200
    assert "Redis" not in text(response)
