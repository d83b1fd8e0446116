"""The jobs admin API's flows endpoints, on the real Redis, with flows run in this process."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from django_jobs.api import flow_urls
from django_jobs.conf import get_settings
from django_jobs.flows import get_run
from django_jobs.flows.details import get_run_detail
from django_jobs.testing import run_burst
from testproject.shop.flows import Steps, StepsFlow, Wait, WaitFlow
from tests.conftest import RedisNamespace, free_port
from tests.integration.api_cells import contents
from tests.integration.staff_kinds import STAFF_KINDS, allowed
from tests.integration.test_api import make_user
from tests.integration.test_api_permissions import api_routes, handled_methods

pytestmark = pytest.mark.django_db

BASE = "/api/v1/admin/flows"


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def ids(response: Any) -> list[str]:
    return [r["call_id"] for r in response.json()["results"]]


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def client_of(user: AbstractUser, **kwargs: Any) -> APIClient:
    client = APIClient(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def api(redis_ns: RedisNamespace) -> APIClient:
    return client_of(make_user("ada", staff=True, perms=("view_task", "change_task")))


def test_list__newest_first_by_status_and_paged(api: APIClient) -> None:
    done = [StepsFlow.start(Steps(n=1), call_id=f"done-{i}") for i in range(3)]
    waiting = WaitFlow.start(Wait(), call_id="waiting")
    drain()
    response = api.get(BASE)
    assert response.status_code == 200
    assert ids(response) == [waiting, *reversed(done)]
    assert ids(api.get(BASE, {"status": "waiting"})) == [waiting]
    assert ids(api.get(BASE, {"flow": StepsFlow.name, "per_page": 2})) == ["done-2", "done-1"]
    first = api.get(BASE, {"per_page": 2}).json()
    assert first["next"].endswith("page=2")
    assert [r["call_id"] for r in api.get(first["next"]).json()["results"]] == ["done-1", "done-0"]
    assert api.get(BASE, {"status": "bogus"}).status_code == 400


def test_run__in_full_and_unknown_is_404(api: APIClient) -> None:
    call = StepsFlow.start(Steps(n=2), metadata={"user": 7})
    drain()
    data = api.get(f"{BASE}/{call}").json()
    assert data["status"] == "succeeded"
    assert data["metadata"] == {"user": 7}
    assert data["output"] == ["s0-done", "s1-done"]
    assert [s["name"] for s in data["steps"]] == ["s0", "s1"]
    assert data["parent_call_id"] == ""
    assert data["version"] == 1
    assert data["children"] == []
    missing = api.get(f"{BASE}/no-such-call")
    assert missing.status_code == 404
    assert "no-such-call" in missing.json()["detail"]
    assert api.post(f"{BASE}/no-such-call/cancel").status_code == 404
    assert api.post(f"{BASE}/no-such-call/signal", {"name": "go"}, format="json").status_code == 404
    assert api.get(f"{BASE}/bad%20id").status_code == 400


def test_signal__wakes_the_run_and_a_second_is_409(api: APIClient) -> None:
    call = WaitFlow.start(Wait())
    drain()
    sent = api.post(f"{BASE}/{call}/signal", {"name": "go", "value": {"amount": 5}}, format="json")
    assert sent.status_code == 200
    assert sent.json()["taken"] is True
    assert sent.json()["run"]["signals"] == [{"name": "go", "value": {"amount": 5}}]
    again = api.post(f"{BASE}/{call}/signal", {"name": "go", "value": 1}, format="json")
    assert again.status_code == 409
    assert "not taken" in again.json()["detail"]
    assert api.post(f"{BASE}/{call}/signal", {}, format="json").status_code == 400
    drain()
    assert get_run(call).output == {"value": {"amount": 5}, "received": True}  # type: ignore[union-attr]


def test_cancel__ends_a_waiting_run_then_409(api: APIClient) -> None:
    call = WaitFlow.start(Wait())
    drain()
    response = api.post(f"{BASE}/{call}/cancel", {"reason": "no longer wanted"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "canceled"
    assert "no longer wanted" in response.json()["error"]
    again = api.post(f"{BASE}/{call}/cancel")
    assert again.status_code == 409
    assert again.json()["status"] == "canceled"
    assert api.get(f"{BASE}/{call}/cancel").status_code == 405


def test_permissions__staff_view_change_and_csrf(redis_ns: RedisNamespace) -> None:
    call = WaitFlow.start(Wait())
    drain()
    assert APIClient().get(BASE).status_code in (401, 403)
    not_staff = client_of(make_user("bob", staff=False, perms=("view_task", "change_task")))
    assert not_staff.get(BASE).status_code == 403
    viewer = client_of(make_user("vic", staff=True, perms=("view_task",)))
    assert viewer.get(f"{BASE}/{call}").status_code == 200
    assert viewer.post(f"{BASE}/{call}/cancel").status_code == 403
    assert viewer.post(f"{BASE}/{call}/signal", {"name": "go"}, format="json").status_code == 403
    csrf = client_of(make_user("cat", staff=True, perms=("change_task",)), enforce_csrf_checks=True)
    refused = csrf.post(f"{BASE}/{call}/cancel")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert csrf.post(f"{BASE}/{call}/signal", {"name": "go"}, format="json").status_code == 403
    assert get_run(call).status == "waiting"  # type: ignore[union-attr]


def test_redis_down__503(api: APIClient, settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "ENQUEUE_TIMEOUT": 1}
    for url in (BASE, f"{BASE}/abc"):
        response = api.get(url)
        assert response.status_code == 503
        assert response.json()["code"] == "broker_unavailable"
    assert api.post(f"{BASE}/abc/cancel").status_code == 503
    settings.JOBS = {"REDIS_URL": None}
    assert api.get(BASE).json()["code"] == "jobs_disabled"


@pytest.mark.django_db(transaction=True)
def test_signal__under_the_outbox_and_atomic_requests_still_answers_409(
    api: APIClient, settings: Any
) -> None:
    """An operator's signal is delivered now, with its real answer, even when every request
    runs in atomic() (ATOMIC_REQUESTS) and the outbox is on (review: it always said taken)."""
    settings.JOBS = {**settings.JOBS, "OUTBOX": True}
    settings.DATABASES["default"]["ATOMIC_REQUESTS"] = True
    try:
        call = WaitFlow.start(Wait())
        drain()
        first = api.post(f"{BASE}/{call}/signal", {"name": "go", "value": 1}, format="json")
        assert first.status_code == 200
        again = api.post(f"{BASE}/{call}/signal", {"name": "go", "value": 2}, format="json")
        assert again.status_code == 409
    finally:
        settings.DATABASES["default"]["ATOMIC_REQUESTS"] = False


# -- every flows endpoint and method, every kind of staff user ------------------------------

#: (method, route as flow_urls writes it) -> the permission it needs; OPTIONS describes an
#: endpoint: who may look may ask.
FLOW_ENDPOINTS = {
    **{(m, r): "view" for r in ("", "/<str:call_id>") for m in ("get", "head")},
    **{
        ("options", r): "view"
        for r in ("", "/<str:call_id>", "/<str:call_id>/cancel", "/<str:call_id>/signal")
    },
    ("post", "/<str:call_id>/cancel"): "change",
    ("post", "/<str:call_id>/signal"): "change",
}


def test_flow_matrix__covers_every_endpoint_and_method() -> None:
    expected = {
        (method, route)
        for route, view in api_routes(flow_urls.urlpatterns)
        for method in handled_methods(view)
    }

    assert set(FLOW_ENDPOINTS) == expected


@pytest.mark.parametrize("endpoint", FLOW_ENDPOINTS, ids=lambda e: f"{e[0].upper()} {e[1]}")
@pytest.mark.parametrize("kind", STAFF_KINDS)
def test_flow_matrix__every_endpoint_needs_its_permission(
    redis_ns: RedisNamespace, kind: str, endpoint: tuple[str, str]
) -> None:
    method, route = endpoint
    call = WaitFlow.start(Wait())
    drain()
    client = client_of(make_user(f"u-{kind}", staff=True, perms=STAFF_KINDS[kind]))
    before = contents(redis_ns)  # whether keys expire, not their TTLs (see contents)
    data = {"name": "go", "value": 1} if route.endswith("signal") else None

    response = getattr(client, method)(BASE + route.replace("<str:call_id>", call), data,
                                       format="json")  # fmt: skip

    if allowed(FLOW_ENDPOINTS[endpoint], kind):
        assert response.status_code == 200, response.content
        if method == "post" and route.endswith("cancel"):
            assert get_run(call).status == "canceled"  # type: ignore[union-attr]
        elif method == "post":
            signals = get_run_detail(call).signals  # type: ignore[union-attr]
            assert [(s.name, s.value) for s in signals] == [("go", 1)]
        else:  # a look writes nothing
            assert contents(redis_ns) == before
    else:
        assert response.status_code == 403, response.content
        assert contents(redis_ns) == before
        assert get_run(call).status == "waiting"  # type: ignore[union-attr]
