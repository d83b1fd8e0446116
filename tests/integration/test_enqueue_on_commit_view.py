"""A view that enqueues three jobs inside its transaction, on commit: one Redis round trip.

Round trips are counted in this process, where redis-py sends them (a pipeline or a script call
is one), on a real transaction (SQLite or PostgreSQL, as DATABASE_URL says).
"""

from dataclasses import dataclass
from typing import Any

import pytest
import redis.connection
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from django_jobs import Job
from tests.conftest import RedisNamespace

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Signup:
    email: str


class Welcome(Job[Signup]):
    def run(self, payload: Signup) -> None:
        pass


class Verify(Job[Signup]):
    def run(self, payload: Signup) -> None:
        pass


class Notify(Job[Signup]):
    def run(self, payload: Signup) -> None:
        pass


def test_enqueue_on_commit__a_view_with_three_jobs_costs_one_round_trip_at_commit(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[bytes] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sent.append(b"".join(command) if isinstance(command, list) else bytes(command))
        original(self, command, check_health)

    in_view: list[int] = []

    @transaction.atomic
    def signup(request: HttpRequest) -> HttpResponse:
        payload = Signup(str(request.GET["email"]))
        for job in (Welcome, Verify, Notify):
            job.enqueue(payload, on_commit=True)
        in_view.append(len(sent))  # nothing sent yet: the batch waits for the commit
        return HttpResponse("ok")

    Welcome.enqueue(Signup("warm@example.com"))  # connected, script loaded
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)

    response = signup(RequestFactory().get("/", {"email": "a@example.com"}))

    monkeypatch.undo()
    assert response.status_code == 200
    assert in_view == [0]
    assert len(sent) == 1, sent  # the commit: one script call for the three
    assert b"EVALSHA" in sent[0]
    assert redis_ns.client.llen(f"{redis_ns.namespace}:{{default}}:pending") == 4
