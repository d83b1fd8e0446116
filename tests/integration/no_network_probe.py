"""Everything a project does with REDIS_URL unset, in one process, reported as JSON.

Run by test_no_network.py in a subprocess whose sitecustomize refuses (and records) every
socket connection and name lookup from the first import on. This module sets Django up, runs
the system checks, migrates, renders every page of the admin's Jobs section, calls every
endpoint of the jobs API, enqueues in each WHEN_DISABLED mode, starts runworker, uses the
cache, and prints what it saw as one JSON object on stdout.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

from django.contrib import admin  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import URLPattern, URLResolver  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from django_jobs import InvalidPayload, Job, JobsDisabled  # noqa: E402
from django_jobs.api import urls as api_urls  # noqa: E402

#: Values for the path converters of the admin's and the API's routes.
ARGUMENTS = {"queue": "default", "task_id": "0" * 32, "name": "nightly"}
API = "/api/v1/admin/jobs"
#: Query strings an endpoint needs to get past its validation.
QUERIES = {f"{API}/tasks": "?state=pending"}


@dataclass(frozen=True)
class Note:
    text: str


ran: list[str] = []


class Record(Job[Note]):
    #: JOBS_EXTRA's schedule (set by the test) names it.
    name = "probe.Record"

    def run(self, payload: Note) -> None:
        ran.append(payload.text)


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.name, record.getMessage()))


def routes(patterns: list[Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """(path with converters filled in, pattern) of every URL pattern below patterns."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, route)
        else:
            assert isinstance(pattern, URLPattern)
            path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ARGUMENTS.get(m[1], "1"), route)
            yield path, pattern


def admin_pages(client: Client) -> list[dict[str, Any]]:
    """GET and POST every URL of the Jobs section, and GET the admin's index pages."""
    seen = []
    for path in ("/admin/", "/admin/django_jobs/"):
        response = client.get(path)
        seen.append({"method": "get", "path": path, "status": response.status_code})
    for path, pattern in routes(admin.site.get_urls(), "/admin/"):
        if not (pattern.name or "").startswith("django_jobs_"):
            continue
        for method in ("get", "post"):
            response = getattr(client, method)(path)
            body = response.content.decode()
            notes = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
            seen.append(
                {
                    "method": method,
                    "path": path,
                    "status": response.status_code,
                    "says_disabled": "jobs are disabled" in body
                    or any("jobs are disabled" in note for note in notes),
                }
            )
    return seen


def api_endpoints(client: APIClient) -> list[dict[str, Any]]:
    """Call every method of every route of the jobs API, and fetch the OpenAPI schema."""
    seen = []
    for path, pattern in routes(api_urls.urlpatterns, API):
        view = pattern.callback.view_class
        methods = [m for m in view.http_method_names if hasattr(view, m) and m != "options"]
        for method in [*methods, *(["head"] if "get" in methods else [])]:
            response = getattr(client, method)(path + QUERIES.get(path, ""))
            body = response.json() if response.content else None
            seen.append(
                {"method": method, "path": path, "status": response.status_code, "body": body}
            )
    schema = client.get("/api/v1/schema")
    seen.append({"method": "get", "path": "/api/v1/schema", "status": schema.status_code})
    return seen


def enqueue_in_each_mode() -> dict[str, Any]:
    found: dict[str, Any] = {}
    with override_settings(JOBS={"REDIS_URL": None, "WHEN_DISABLED": "inline"}):
        handle = Record.enqueue(Note("inline"))
        with transaction.atomic():
            deferred = Record.enqueue(Note("on commit"), on_commit=True)
            ran_before_commit = list(ran)
        try:
            Record.enqueue(Note({"a set"}))  # type: ignore[arg-type]
            json_error = ""
        except InvalidPayload as exc:
            json_error = str(exc)
        try:
            Record.enqueue({"text": "a dict"})  # type: ignore[arg-type]
            type_error = ""
        except InvalidPayload as exc:
            type_error = str(exc)
        try:
            handle.refresh()
            refresh = ""
        except JobsDisabled as exc:
            refresh = str(exc)
        found["inline"] = {
            "state": handle.state,
            "deferred_state": deferred.state,
            "ran_before_commit": ran_before_commit,
            "ran": list(ran),
            "json_error": json_error,
            "type_error": type_error,
            "refresh": refresh,
        }
    with override_settings(JOBS={"REDIS_URL": None, "WHEN_DISABLED": "skip"}):
        skipped = Record.enqueue(Note("skip"))
        found["skip"] = {"state": skipped.state, "id": skipped.id, "ran": list(ran)}
    with override_settings(JOBS={"REDIS_URL": None, "WHEN_DISABLED": "raise"}):
        try:
            Record.enqueue(Note("raise"))
            found["raise"] = ""
        except JobsDisabled as exc:
            found["raise"] = str(exc)
    return found


def main() -> None:
    collect = Collect()
    logging.getLogger("django_jobs").addHandler(collect)
    logging.getLogger("django_jobs").setLevel(logging.DEBUG)
    report: dict[str, Any] = {"redis_url": os.environ.get("REDIS_URL")}

    checks = io.StringIO()
    call_command("check", stdout=checks, stderr=checks)
    report["checks"] = checks.getvalue()
    call_command("migrate", verbosity=0)
    user = User.objects.create_superuser("ada", "ada@example.com", None)

    client = Client()
    client.force_login(user)
    report["admin"] = admin_pages(client)
    api = APIClient()
    api.force_authenticate(user)
    report["api"] = api_endpoints(api)
    report["enqueue"] = enqueue_in_each_mode()

    worker = io.StringIO()
    try:
        call_command("runworker", stdout=worker, stderr=worker)
        report["runworker_exit"] = 0
    except SystemExit as exc:
        report["runworker_exit"] = exc.code
    report["runworker"] = worker.getvalue()

    cache = caches["default"]
    cache.set("probe", "kept")
    report["cache"] = [type(cache).__name__, cache.get("probe")]

    # The guard itself: a connection made on purpose must be refused and recorded.
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1)
        report["guard"] = "connected"
    except OSError as exc:
        report["guard"] = str(exc)
    report["logs"] = collect.lines
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
