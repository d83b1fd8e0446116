"""The jobs admin API under a flood: token authentication, JOBS["API_THROTTLE_RATE"] (429 past
it, per user), and request bodies too large for any endpoint (413 before anything is read); the
admin's forms under Django's DATA_UPLOAD_MAX_MEMORY_SIZE."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from tests.conftest import RedisNamespace
from tests.integration.test_api import BASE, EVERY_PERMISSION, dead, make_user

pytestmark = pytest.mark.django_db

TEN_MB = 10 * 1024 * 1024


def token_client(name: str, *, perms: tuple[str, ...] = EVERY_PERMISSION) -> APIClient:
    """A client that authenticates with a real DRF token (no session)."""
    token = Token.objects.create(user=make_user(name, staff=True, perms=perms))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def rate(redis_ns: RedisNamespace, settings: Any) -> None:
    settings.JOBS = {**settings.JOBS, "API_THROTTLE_RATE": "3/minute"}


def test_token__authenticates_and_a_wrong_one_is_refused(redis_ns: RedisNamespace) -> None:
    good = token_client("ada")
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)

    refused = wrong.get(BASE)

    assert good.get(BASE).status_code == 200
    # 401 when the first authentication class asks for credentials; the project's is session.
    assert refused.status_code in (401, 403)
    assert refused.json()["detail"] == "Invalid token."
    assert APIClient().get(BASE).status_code in (401, 403)


def test_throttle__past_the_rate_is_429_per_user(rate: None) -> None:
    ada, bob = token_client("ada"), token_client("bob")

    codes = [ada.get(BASE).status_code for _ in range(4)]
    refused = ada.get(f"{BASE}/failed")

    assert codes == [200, 200, 200, 429]
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "throttled" in refused.json()["detail"].lower()
    assert bob.get(BASE).status_code == 200  # a budget of his own


def test_throttle__changes_are_throttled_too(rate: None) -> None:
    ada = token_client("ada")
    task_id = dead()
    for _ in range(3):
        ada.get(BASE)

    response = ada.post(f"{BASE}/{task_id}/retry")

    assert response.status_code == 429
    (task,) = get_inspector().broker.task_infos("default", [task_id])
    assert task is not None
    assert task.state == State.DEAD


def test_throttle__none_turns_it_off(redis_ns: RedisNamespace, settings: Any) -> None:
    settings.JOBS = {**settings.JOBS, "API_THROTTLE_RATE": None}
    ada = token_client("ada")

    assert {ada.get(BASE).status_code for _ in range(20)} == {200}


def test_body__ten_mb_is_refused_before_anything_is_read(redis_ns: RedisNamespace) -> None:
    task_id = dead()
    body = b"x" * TEN_MB

    for client in (token_client("ada"), APIClient()):
        response = client.post(
            f"{BASE}/{task_id}/retry", data=body, content_type="application/json"
        )
        assert response.status_code == 413
        assert "10,485,760 bytes" in response.json()["detail"]
    (task,) = get_inspector().broker.task_infos("default", [task_id])
    assert task is not None
    assert task.state == State.DEAD


def test_body__data_upload_max_memory_size_is_respected(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    ada = token_client("ada")

    small = ada.post(f"{BASE}/queues/low/pause", data=b"{}", content_type="application/json")
    large = ada.post(f"{BASE}/queues/low/resume", data=b" " * 2000, content_type="application/json")

    assert (small.status_code, large.status_code) == (200, 413)
    assert "1,000 at most" in large.json()["detail"]


def test_body__the_admin_refuses_ten_mb_forms(redis_ns: RedisNamespace) -> None:
    task_id = dead()
    client = Client()
    client.force_login(User.objects.create_superuser("root"))
    url = reverse("admin:django_jobs_task_changelist") + "?queue=default&state=dead"

    response = client.post(
        url,
        data=f"action=delete_selected&post=yes&_selected_action={task_id}&pad=" + "x" * TEN_MB,
        content_type="application/x-www-form-urlencoded",
    )

    assert response.status_code == 400
    (task,) = get_inspector().broker.task_infos("default", [task_id])
    assert task is not None
    assert task.state == State.DEAD


def test_throttle__refused_sign_ins_are_throttled_per_address(rate: None) -> None:
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    nobody = APIClient()
    elsewhere = APIClient(REMOTE_ADDR="10.9.8.7")
    elsewhere.credentials(HTTP_AUTHORIZATION="Token " + "1" * 40)

    codes = [wrong.get(BASE).status_code for _ in range(3)]
    refused = wrong.get(BASE)

    assert set(codes) <= {401, 403}
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert nobody.get(BASE).status_code == 429  # one address: guesses and no credentials alike
    assert elsewhere.get(BASE).status_code in (401, 403)  # a budget of its own
    ada = token_client("ada")
    ada.defaults["REMOTE_ADDR"] = "10.1.2.3"
    assert ada.get(BASE).status_code == 200  # a signed-in user elsewhere is apart


def test_throttle__an_address_past_its_refusals_is_answered_before_any_token_is_looked_up(
    rate: None,
) -> None:
    """Past the budget even a right token waits for the window (429, Retry-After), and no token
    is looked up: a guess cannot tell a hit from a miss, nor load the database."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ada = token_client("ada")
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    assert [wrong.get(BASE).status_code for _ in range(4)][-1] == 429

    with CaptureQueriesContext(connection) as queries:
        right = ada.get(BASE)
        guess = wrong.get(BASE)

    assert (right.status_code, guess.status_code) == (429, 429)
    assert int(right["Retry-After"]) > 0
    assert not [q for q in queries.captured_queries if "authtoken" in q["sql"]]


def test_throttle__a_forged_x_forwarded_for_gets_no_fresh_budget(rate: None) -> None:
    """With REST_FRAMEWORK["NUM_PROXIES"] unset, DRF believes X-Forwarded-For whole: the
    refused sign-ins are counted by the connection's address instead."""
    codes = [
        APIClient().get(BASE, HTTP_X_FORWARDED_FOR=f"10.0.0.{n}").status_code for n in range(5)
    ]
    assert codes[:3] in ([401] * 3, [403] * 3)
    assert codes[3:] == [429, 429]


def test_throttle__a_cache_that_fails_lets_refusals_answer_as_refusals(
    rate: None, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A real cache that does not answer (Redis on a closed port): the refused sign-in gets its
    401/403, not a 500, and the log says the throttle could not count it."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }
    response = APIClient().get(BASE, HTTP_X_FORWARDED_FOR="x" * 300)
    assert response.status_code in (401, 403)
    assert "sign-in throttle cannot use the cache" in caplog.text
