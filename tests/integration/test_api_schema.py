"""The admin API's OpenAPI schema, and a property-based run of the API against it.

schemathesis generates requests from the schema (valid ones, and in negative mode invalid ones)
for every operation, sends them through the project's WSGI application with the token of a
staff user holding every jobs permission, and checks each answer: never a 500, a documented
status code and content type, a body that the schema describes, and no data without
credentials. Each operation gets at most MAX_EXAMPLES examples per mode, so the whole run stays
within seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from testproject.shop.flows import Wait, WaitFlow
from tests.conftest import RedisNamespace
from tests.integration.test_api import EVERY_PERMISSION, Noop, Note, grant, seed_every_state

SCHEMA_URL = "/api/v1/schema"
#: Every operation of the API: (method, path template).
OPERATIONS = [
    ("GET", "/api/v1/admin/jobs"),
    ("GET", "/api/v1/admin/jobs/failed"),
    ("GET", "/api/v1/admin/jobs/tasks"),
    ("GET", "/api/v1/admin/jobs/{task_id}"),
    ("DELETE", "/api/v1/admin/jobs/{task_id}"),
    ("POST", "/api/v1/admin/jobs/{task_id}/retry"),
    ("POST", "/api/v1/admin/jobs/{task_id}/cancel"),
    ("POST", "/api/v1/admin/jobs/queues/{queue}/pause"),
    ("POST", "/api/v1/admin/jobs/queues/{queue}/resume"),
    ("POST", "/api/v1/admin/jobs/queues/{queue}/dead/retry"),
    ("DELETE", "/api/v1/admin/jobs/queues/{queue}/dead"),
    ("GET", "/api/v1/admin/jobs/schedules"),
    ("GET", "/api/v1/admin/jobs/schedules/{name}"),
    ("POST", "/api/v1/admin/jobs/schedules/{name}/run"),
    ("POST", "/api/v1/admin/jobs/schedules/{name}/pause"),
    ("POST", "/api/v1/admin/jobs/schedules/{name}/resume"),
    ("GET", "/api/v1/admin/flows"),
    ("GET", "/api/v1/admin/flows/{call_id}"),
    ("POST", "/api/v1/admin/flows/{call_id}/cancel"),
    ("POST", "/api/v1/admin/flows/{call_id}/signal"),
]
#: A schedule for the generated requests to find.
SCHEDULE = {"sync": {"job": Noop.name, "every": 30, "payload": {"text": "scheduled"}}}
MAX_EXAMPLES = 50
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]


def served_schema() -> dict[str, Any]:
    response = APIClient().get(SCHEMA_URL, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema: dict[str, Any] = json.loads(response.content)
    return schema


def test_schema__is_valid_openapi(db: None) -> None:
    validate_schema(served_schema())


def test_schema__describes_every_operation(db: None) -> None:
    paths = served_schema()["paths"]

    described = {(method.upper(), path) for path, item in paths.items() for method in item}

    assert described == set(OPERATIONS)
    task = paths["/api/v1/admin/jobs/{task_id}"]["get"]
    (task_id,) = task["parameters"]
    assert task_id["schema"]["pattern"] == "^[0-9a-f]{32}$"
    assert set(task["responses"]) == {"200", "400", "401", "403", "404", "413", "429", "503"}
    assert set(paths["/api/v1/admin/jobs/{task_id}/retry"]["post"]["responses"]) >= {"409"}
    # Every operation can refuse a user without the jobs permission it needs.
    assert all("403" in op["responses"] for item in paths.values() for op in item.values())
    failed = paths["/api/v1/admin/jobs/failed"]["get"]
    assert {p["name"] for p in failed["parameters"]} == {
        "queue",
        "job",
        "per_page",
        "cursor",
        "order",
    }
    schedule = paths["/api/v1/admin/jobs/schedules/{name}"]["get"]
    assert set(schedule["responses"]) == {"200", "401", "403", "404", "413", "429", "503"}
    assert set(paths["/api/v1/admin/jobs/schedules"]["get"]["responses"]) >= {"200", "403"}
    flow = paths["/api/v1/admin/flows/{call_id}"]["get"]
    assert set(flow["responses"]) == {"200", "400", "401", "403", "404", "413", "429", "503"}
    for action in ("cancel", "signal"):
        post = paths[f"/api/v1/admin/flows/{{call_id}}/{action}"]["post"]
        assert set(post["responses"]) >= {"200", "403", "404", "409", "503"}


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    """Calls through the WSGI app must not close the test's database connection.

    Django closes stale connections when a request starts and ends; inside a test's
    transaction that closes it for good (on PostgreSQL). Django's test client disconnects
    the same handler for the same reason.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def token(db: None) -> str:
    user = get_user_model().objects.create_user(username="ada", is_staff=True)
    grant(user, *EVERY_PERMISSION)
    return Token.objects.create(user=user).key


@pytest.fixture
def seeded(redis_ns: RedisNamespace, settings: Any) -> dict[str, str]:
    """A task in every state, and a few more pending ones (state -> id of one of each); a
    schedule named "sync"; a flow run "seeded-run" (started, not yet replayed)."""
    settings.JOBS = {**settings.JOBS, "SCHEDULE": SCHEDULE}
    WaitFlow.start(Wait(), call_id="seeded-run")
    for n in range(3):
        Noop.enqueue(Note(f"more {n}"), queue="low")
    return seed_every_state()


@pytest.fixture
def api_schema(db: None) -> schemathesis.BaseSchema:
    # The run sends a staff token of its own: no generated credentials beside it.
    config = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
    return schemathesis.openapi.from_wsgi(SCHEMA_URL, get_wsgi_application(), config=config)


def run_examples(
    strategy: st.SearchStrategy[schemathesis.Case], test: Callable[[schemathesis.Case], None]
) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: schemathesis.Case) -> None:
        test(case)

    run()


#: (method, path, mode) for every operation in positive mode, and in negative mode for those
#: with a parameter that can be invalid (a free-form path segment such as {queue} cannot).
RUNS = [(method, path, GenerationMode.POSITIVE) for method, path in OPERATIONS] + [
    (method, path, GenerationMode.NEGATIVE)
    for method, path in OPERATIONS
    if "{task_id}" in path or "{call_id}" in path or path.endswith(("/failed", "/tasks", "/flows"))
]


@pytest.mark.parametrize(("method", "path", "mode"), RUNS)
def test_schema__generated_requests_get_no_500_and_conforming_answers(
    api_schema: schemathesis.BaseSchema,
    token: str,
    seeded: dict[str, str],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    operation = api_schema[path][method]
    strategies = [operation.as_strategy(generation_mode=mode)]
    # Values drawn from the schema are almost never a real task or queue: aim at real ones too.
    if mode == GenerationMode.POSITIVE and "{task_id}" in path:
        strategies += [
            operation.as_strategy(generation_mode=mode, path_parameters={"task_id": task_id})
            for task_id in seeded.values()
        ]
    if mode == GenerationMode.POSITIVE and "{call_id}" in path:
        strategies.append(
            operation.as_strategy(generation_mode=mode, path_parameters={"call_id": "seeded-run"})
        )
    if mode == GenerationMode.POSITIVE and "{name}" in path:
        strategies.append(
            operation.as_strategy(generation_mode=mode, path_parameters={"name": "sync"})
        )
    if mode == GenerationMode.POSITIVE and "{queue}" in path:
        strategies += [
            operation.as_strategy(generation_mode=mode, path_parameters={"queue": queue})
            for queue in ("critical", "default", "low")
        ]
    checks = [*CHECKS, negative_data_rejection] if mode == GenerationMode.NEGATIVE else CHECKS
    headers = {"Authorization": f"Token {token}"}
    statuses: list[int] = []

    def check(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        statuses.append(response.status_code)
        case.validate_response(response, checks=checks, headers=headers)

    run_examples(st.one_of(strategies), check)

    assert 500 not in statuses
    if mode == GenerationMode.POSITIVE:
        assert any(200 <= status < 300 for status in statuses), statuses
    else:
        assert any(status == 400 for status in statuses), statuses
