"""Job's enqueue hooks: `default_queue()` picks the queue an enqueue that names none goes to,
`check_payload()` refuses a payload before anything is sent; enqueue and enqueue_many both call
them (SendEmail uses them for JOBS["EMAIL_QUEUE"] and its template check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.template import TemplateDoesNotExist

from django_jobs.jobs import Job
from django_jobs.mail import SendEmail, SendEmailPayload
from tests.conftest import RedisNamespace
from tests.integration.test_mail import pending, templates  # noqa: F401 (a fixture)
from tests.mailing import queue_mail


@dataclass(frozen=True)
class Number:
    n: int


class Picky(Job[Number]):
    name = "tests.hooks.Picky"

    @classmethod
    def default_queue(cls) -> str:
        return "low"

    @classmethod
    def check_payload(cls, payload: Number) -> None:
        if payload.n < 0:
            raise ValueError("n must not be negative")

    def run(self, payload: Number) -> None:
        pass


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_default_queue__an_enqueue_naming_no_queue_goes_there(
    redis_ns: RedisNamespace, many: bool
) -> None:
    if many:
        Picky.enqueue_many([Number(1), Number(2)])
    else:
        Picky.enqueue(Number(1))

    assert (pending(redis_ns, "default"), pending(redis_ns, "low")) == (0, 2 if many else 1)


def test_default_queue__a_named_queue_wins(redis_ns: RedisNamespace) -> None:
    handle = Picky.enqueue(Number(1), queue="critical")

    assert (handle.queue, pending(redis_ns, "critical"), pending(redis_ns, "low")) == (
        "critical", 1, 0,
    )  # fmt: skip


def test_check_payload__one_refused_payload_sends_none_of_a_batch(
    redis_ns: RedisNamespace,
) -> None:
    with pytest.raises(ValueError, match="negative"):
        Picky.enqueue_many([Number(1), Number(-1)])
    with pytest.raises(ValueError, match="negative"):
        Picky.enqueue(Number(-1))

    assert pending(redis_ns, "low") == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("templates")
def test_send_email__enqueue_many_uses_the_email_queue_and_checks_templates(
    settings: Any, redis_ns: RedisNamespace, mailoutbox: Any
) -> None:
    queue_mail(settings, EMAIL_QUEUE="low")
    good = SendEmailPayload(to="a@example.com", template="mail/plain.txt")

    with pytest.raises(TemplateDoesNotExist):
        SendEmail.enqueue_many([good, SendEmailPayload(to="b@example.com", template="nope.txt")])
    SendEmail.enqueue_many([good, good])

    assert (pending(redis_ns, "critical"), pending(redis_ns, "low")) == (0, 2)
    assert "enqueue" not in SendEmail.__dict__  # the hooks, not a copy of Job.enqueue
