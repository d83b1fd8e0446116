"""`Job.sensitive`: a sensitive job's payload and idempotency key are shown redacted by every
reader (the admin's pages, the API, `manage.py jobs`, the logs and the errors), a normal job's
as they are; the job itself gets its payload, and retry from the admin works. Against the real
Redis, with jobs run by run_burst."""

from __future__ import annotations

import html
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs import Job
from django_jobs.backends.outbox import send_rows
from django_jobs.client import get_broker
from django_jobs.conf.redact import REDACTED
from django_jobs.exceptions import InvalidPayload
from django_jobs.keys import State
from django_jobs.message import (
    SENSITIVE_MARK,
    DecodeError,
    Message,
    decode,
    encode,
    payload_from_json,
)
from django_jobs.models import OutboxJob
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace
from tests.integration.test_admin import text
from tests.integration.test_cli_jobs import jobs, jobs_json

pytestmark = pytest.mark.django_db

SECRET = "ada@example.com"
TASKS = reverse("admin:django_jobs_task_changelist")
API = "/api/v1/admin/jobs"

#: Payloads the sensitive jobs received, to show the job itself gets its payload whole.
received: list[str] = []
#: While set, the payload refuses itself when built (as a __post_init__ check would), quoting
#: its value: what a worker's decoding error looks like.
strict = False


@dataclass
class Person:
    email: str

    def __post_init__(self) -> None:
        if strict:
            raise ValueError(f"{self.email} is not allowed")


class PrivateFails(Job[Person]):
    sensitive = True
    max_attempts = 1

    def run(self, payload: Person) -> None:
        received.append(payload.email)
        if len(received) == 1:
            raise RuntimeError("the mail server said no")


class PublicFails(Job[Person]):
    max_attempts = 1

    def run(self, payload: Person) -> None:
        raise RuntimeError("the mail server said no")


@pytest.fixture(autouse=True)
def fresh(redis_ns: RedisNamespace) -> None:
    global strict
    received.clear()
    strict = False


def dead(job: type[Job[Person]], key: str | None = SECRET) -> str:
    handle = job.enqueue(Person(SECRET), idempotency_key=key)
    run_burst()
    assert handle.refresh() == State.DEAD
    return handle.id


def staff() -> Client:
    user = User.objects.create_user("operator", is_staff=True)
    for codename in ("view_task", "change_task", "delete_task"):
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_jobs", codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def task_url(task_id: str, action: str = "change") -> str:
    return reverse(f"admin:django_jobs_task_{action}", args=["default", task_id])


# -- the record ---------------------------------------------------------------------------


def test_message__carries_the_flag_as_version_2_and_a_normal_one_stays_version_1() -> None:
    common: dict[str, Any] = {"id": "a" * 32, "job": "x.Y", "queue": "default",
                              "payload": {"email": SECRET}, "max_attempts": 1, "timeout": 1.0,
                              "retention": 0.0}  # fmt: skip
    sensitive, normal = Message(**common, sensitive=True), Message(**common)

    assert json.loads(encode(sensitive))["v"] == 2
    assert json.loads(encode(sensitive))["sensitive"] is True
    assert SENSITIVE_MARK in encode(sensitive)
    assert decode(encode(sensitive), "a" * 32, "default") == sensitive
    assert json.loads(encode(normal))["v"] == 1  # readable by the release before
    assert "sensitive" not in json.loads(encode(normal))
    assert decode(encode(normal), "a" * 32, "default").sensitive is False
    # A version 3 record (a later release's) that says so is read as sensitive.
    assert SENSITIVE_MARK in encode(sensitive, version=3)
    assert decode(encode(sensitive, version=3), "a" * 32, "default") == sensitive


def test_enqueue__writes_the_flag_of_the_job_type() -> None:
    private = PrivateFails.enqueue(Person(SECRET)).id
    public = PublicFails.enqueue(Person(SECRET)).id

    (p, n) = get_broker().task_infos("default", [private, public])

    assert p is not None
    assert n is not None
    assert (p.sensitive, n.sensitive) == (True, False)
    assert p.payload == {"email": SECRET}  # kept whole for what runs it (django.tasks results)


def test_errors__do_not_echo_a_sensitive_payload() -> None:
    global strict
    with pytest.raises(InvalidPayload) as private:
        PrivateFails.enqueue(Person((SECRET,)))  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload) as public:
        PublicFails.enqueue(Person((SECRET,)))  # type: ignore[arg-type]
    strict = True
    with pytest.raises(DecodeError) as decoding:
        payload_from_json({"email": SECRET}, Person, sensitive=True)

    assert SECRET not in str(private.value)
    assert "not shown: a sensitive job" in str(private.value)
    assert SECRET in str(public.value)
    assert SECRET not in str(decoding.value)
    assert "ValueError" in str(decoding.value)


# -- the admin ------------------------------------------------------------------------------


def test_admin__task_page_and_list_redact_a_sensitive_job() -> None:
    private, public = dead(PrivateFails, key=f"private {SECRET}"), dead(PublicFails)
    client = staff()

    private_page = html.unescape(client.get(task_url(private)).content.decode())
    public_page = html.unescape(client.get(task_url(public)).content.decode())
    whole = {"state": "dead", "q": f"private {SECRET}"}
    listing = html.unescape(client.get(TASKS, whole).content.decode())
    # A part of the key finds a normal task, not a sensitive one: parts would spell it out.
    part = html.unescape(client.get(TASKS, {"state": "dead", "q": "ada@"}).content.decode())

    assert SECRET not in private_page
    assert f"Idempotency key: {REDACTED}" in text(client.get(task_url(private)))
    assert f'<pre class="jobs-pre jobs-payload">{REDACTED}</pre>' in private_page
    assert SECRET in public_page
    assert private in listing  # still found by its whole key
    assert re.findall(r'<td class="field-idempotency-key"[^>]*>(.*?)</td>', listing) == [REDACTED]
    assert private not in part
    assert public in part


def test_admin__redacts_a_job_type_this_process_does_not_know(redis_ns: RedisNamespace) -> None:
    task_id = PrivateFails.enqueue(Person(SECRET)).id
    key = get_broker().keys("default").task(task_id)
    record = json.loads(redis_ns.client.hget(key, "msg"))
    record["job"] = "elsewhere.NotDeployedHereYet"
    redis_ns.client.hset(key, "msg", json.dumps(record))
    undecodable = PrivateFails.enqueue(Person(SECRET)).id
    broken = get_broker().keys("default").task(undecodable)
    redis_ns.client.hset(broken, "msg", redis_ns.client.hget(broken, "msg")[:-1])

    page = html.unescape(staff().get(task_url(task_id)).content.decode())
    corrupt = html.unescape(staff_page(undecodable))

    assert "elsewhere.NotDeployedHereYet" in page
    assert SECRET not in page
    assert "cannot be decoded" in corrupt
    assert SECRET not in corrupt


def staff_page(task_id: str) -> str:
    User.objects.filter(username="operator").delete()
    return staff().get(task_url(task_id)).content.decode()


def test_admin__retry_of_a_sensitive_job_runs_it_with_its_payload() -> None:
    task_id = dead(PrivateFails)

    response = staff().post(task_url(task_id, "retry"))
    run_burst()

    assert response.status_code == 302
    assert received == [SECRET, SECRET]
    info = get_broker().task_infos("default", [task_id])[0]
    assert info is not None
    assert info.state == State.COMPLETED


# -- the API and the CLI --------------------------------------------------------------------


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_login(User.objects.create_user("ada", is_staff=True, is_superuser=True))
    return client


def test_api__detail_and_listing_redact_a_sensitive_job(api: APIClient) -> None:
    private, public = dead(PrivateFails), dead(PublicFails)

    detail = api.get(f"{API}/{private}").json()
    normal = api.get(f"{API}/{public}").json()
    listed = api.get(f"{API}/failed").json()["results"]

    assert (detail["payload"], detail["idempotency_key"], detail["raw"]) == (REDACTED,) * 3
    assert detail["sensitive"] is True
    assert SECRET not in json.dumps(detail) + json.dumps([t for t in listed if t["id"] == private])
    assert normal["payload"] == {"email": SECRET}
    assert normal["idempotency_key"] == SECRET
    assert normal["sensitive"] is False
    assert {t["id"]: t["sensitive"] for t in listed} == {private: True, public: False}


def test_cli__show_and_ls_redact_a_sensitive_job() -> None:
    private, public = dead(PrivateFails), dead(PublicFails)

    shown, normal = jobs_json("show", private), jobs_json("show", public)
    out, _ = jobs("show", private)
    listed = jobs_json("ls", "dead")

    assert (shown["payload"], shown["idempotency_key"]) == (REDACTED, REDACTED)
    private_row = [t for t in listed["tasks"] if t["id"] == private]
    assert SECRET not in json.dumps(shown) + out + json.dumps(private_row)
    assert REDACTED in out
    assert normal["payload"] == {"email": SECRET}
    assert normal["idempotency_key"] == SECRET
    assert {t["id"]: t["payload"] for t in listed["tasks"]} == {
        private: REDACTED,
        public: {"email": SECRET},
    }


# -- the logs -------------------------------------------------------------------------------


def test_worker_logs__a_sensitive_payload_that_fails_to_decode_is_not_quoted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    global strict
    private = PrivateFails.enqueue(Person(SECRET)).id
    public = PublicFails.enqueue(Person(SECRET)).id
    strict = True  # the payload class changed while the tasks waited

    with caplog.at_level(logging.INFO, logger="django_jobs"):
        run_burst()

    private_lines = [r.getMessage() for r in caplog.records if private in r.getMessage()]
    public_lines = [r.getMessage() for r in caplog.records if public in r.getMessage()]
    assert private_lines
    assert public_lines
    assert not [line for line in private_lines if SECRET in line]
    assert [line for line in public_lines if SECRET in line]
    error = get_broker().task_infos("default", [private])[0]
    assert error is not None
    assert error.error is not None
    assert SECRET not in error.error


def test_duplicate_logs__name_no_key_of_a_sensitive_job(
    caplog: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: Any
) -> None:
    for job in (PrivateFails, PublicFails):
        job.enqueue(Person(SECRET), idempotency_key=f"{job.__name__} {SECRET}")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        for job in (PrivateFails, PublicFails):  # at commit: a duplicate, logged
            job.enqueue(Person(SECRET), idempotency_key=f"{job.__name__} {SECRET}", on_commit=True)
    with transaction.atomic():
        for job in (PrivateFails, PublicFails):  # a row the relay finds a duplicate of
            job.enqueue(Person(SECRET), idempotency_key=f"{job.__name__} {SECRET}", outbox=True)
    rows = list(OutboxJob.objects.order_by("pk"))

    with caplog.at_level(logging.INFO, logger="django_jobs"):
        send_rows(rows, connection.alias)

    lines = [r.getMessage() for r in caplog.records if "already accepted" in r.getMessage()]
    private = [line for line in lines if PrivateFails.name in line]
    public = [line for line in lines if PublicFails.name in line]
    assert len(private) == len(public) == 2, lines
    assert all(REDACTED in line and SECRET not in line for line in private), private
    assert all(SECRET in line for line in public), public
