"""Mail through the queue: QueuedEmailBackend, DeliverEmail, SendEmail (run with run_burst).

Both configuration styles: MAILERS on Django 6.1+, EMAIL_BACKEND + JOBS["EMAIL_BACKEND"] before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.mail import EmailMessage, EmailMultiAlternatives, send_mail, send_mass_mail
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend

from django_jobs import PayloadTooLarge
from django_jobs.mail import DeliverEmail, EmailPayload, SendEmail, SendEmailPayload
from django_jobs.mail.delivery import mail_key
from django_jobs.models import ProcessedTask
from django_jobs.testing import run_burst
from testproject.probes.mail import full_message
from tests.conftest import RedisNamespace
from tests.mailing import MAILERS, mime, queue_mail

TEMPLATES = Path(__file__).parent / "templates"


@pytest.fixture
def queued(settings: Any, redis_ns: RedisNamespace, mailoutbox: Any) -> RedisNamespace:
    queue_mail(settings)
    return redis_ns


def pending(ns: RedisNamespace, queue: str = "critical") -> int:
    return int(ns.client.llen(f"{ns.namespace}:{{{queue}}}:pending"))


@pytest.mark.django_db(transaction=True)
def test_queued_backend__send_mail_queues_a_job_and_sends_nothing(queued: RedisNamespace) -> None:
    assert send_mail("Hi", "Body", None, ["ada@example.com"]) == 1

    assert mail.outbox == []
    assert pending(queued) == 1
    outcomes = run_burst()
    assert [(o.job, o.state) for o in outcomes] == [("django_jobs.DeliverEmail", "completed")]
    assert [(m.subject, m.to) for m in mail.outbox] == [("Hi", ["ada@example.com"])]


@pytest.mark.django_db(transaction=True)
def test_queued_backend__every_part_survives_the_trip(queued: RedisNamespace) -> None:
    original = full_message()

    assert original.send() == 1
    run_burst()

    (delivered,) = mail.outbox
    assert isinstance(delivered, EmailMultiAlternatives)
    for field in ("subject", "body", "from_email", "to", "cc", "bcc", "reply_to"):
        assert getattr(delivered, field) == getattr(original, field), field
    assert delivered.recipients() == original.recipients()
    assert delivered.alternatives == original.alternatives
    # Date and Message-ID were fixed when the message was queued; with them, the MIME bytes
    # the real backend sends are the bytes the caller's message would have produced.
    stamped = {k: delivered.extra_headers[k] for k in ("Date", "Message-ID")}
    assert original.extra_headers.keys() == {"X-Order", "List-Unsubscribe"}  # not changed
    original.extra_headers.update(stamped)
    assert mime(delivered) == mime(original)


@pytest.mark.django_db(transaction=True)
def test_queued_backend__send_mass_mail_is_one_job_per_message(queued: RedisNamespace) -> None:
    sent = send_mass_mail(
        [
            ("A", "a", None, ["a@example.com"]),
            ("B", "b", None, ["b@example.com"]),
            ("none", "nobody", None, []),
        ]
    )

    assert sent == 2
    assert pending(queued) == 2
    run_burst()
    assert sorted(m.subject for m in mail.outbox) == ["A", "B"]


@pytest.mark.django_db(transaction=True)
def test_queued_backend__uses_the_configured_queue(
    settings: Any, redis_ns: RedisNamespace, mailoutbox: Any
) -> None:
    queue_mail(settings, EMAIL_QUEUE="low")

    send_mail("Hi", "Body", None, ["ada@example.com"])

    assert (pending(redis_ns, "critical"), pending(redis_ns, "low")) == (0, 1)


@pytest.mark.django_db(transaction=True)
def test_queued_backend__too_large_a_message_raises_at_send_time(
    settings: Any, redis_ns: RedisNamespace, mailoutbox: Any
) -> None:
    queue_mail(settings, MAX_PAYLOAD_BYTES=10_000)
    message = EmailMessage("Big", "body", to=["ada@example.com"])
    message.attach("big.bin", b"x" * 20_000, "application/octet-stream")

    with pytest.raises(PayloadTooLarge, match=r"is \d+ bytes, over the limit of 10000") as exc:
        message.send()

    assert exc.value.size > 20_000
    assert pending(redis_ns) == 0


@pytest.mark.django_db(transaction=True)
def test_deliver_email__a_second_run_of_a_sent_task_does_not_send_again(
    queued: RedisNamespace,
) -> None:
    from django_jobs.jobs import JobContext
    from django_jobs.mail.serialize import message_to_dict

    payload = EmailPayload(message_to_dict(EmailMessage("Once", "b", to=["a@example.com"])))
    context = JobContext(job_id="t1", attempt=1, crashes=0, queue="critical", deadline=0)
    DeliverEmail(context).run(payload)
    # The worker died after the send committed and before the ack: the task runs again.
    DeliverEmail(JobContext("t1", 1, 1, "critical", 0)).run(payload)

    assert [m.subject for m in mail.outbox] == ["Once"]
    assert ProcessedTask.objects.filter(key=mail_key("t1")).count() == 1


@pytest.mark.django_db(transaction=True)
def test_deliver_email__a_failed_send_rolls_back_its_key_and_retries(
    settings: Any, redis_ns: RedisNamespace, mailoutbox: Any
) -> None:
    queue_mail(settings)
    send_mail("Hi", "Body", None, ["ada@example.com"])
    broken = {"BACKEND": "tests.integration.test_mail.FailingBackend"}
    if MAILERS:
        settings.MAILERS = {**settings.MAILERS, "real": broken}
    else:
        settings.JOBS = {**settings.JOBS, "EMAIL_BACKEND": broken["BACKEND"]}

    outcomes = run_burst()

    assert [o.state for o in outcomes] == ["retry"]
    assert "SMTP is down" in outcomes[0].error
    assert ProcessedTask.objects.count() == 0


class FailingBackend(LocmemBackend):
    def send_messages(self, messages: Any) -> int:
        raise ConnectionRefusedError("SMTP is down")


@pytest.fixture
def templates(settings: Any) -> None:
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "DIRS": [TEMPLATES]},
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("templates")
def test_send_email__renders_subject_text_and_escaped_html(queued: RedisNamespace) -> None:
    SendEmail.enqueue(
        SendEmailPayload(
            to="ada@example.com", template="mail/welcome.html", data={"name": "Ada <admin>"}
        )
    )

    outcomes = run_burst()

    assert [o.state for o in outcomes] == ["completed"]
    (sent,) = mail.outbox
    assert sent.subject == "Welcome, Ada <admin>!"
    assert sent.to == ["ada@example.com"]
    assert sent.body == "Hello Ada <admin>, welcome aboard.\n"
    assert sent.alternatives[0].mimetype == "text/html"
    assert "<p>Hello <b>Ada &lt;admin&gt;</b></p>" in sent.alternatives[0].content


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("templates")
def test_send_email__a_list_of_recipients_and_a_template_without_html(
    queued: RedisNamespace,
) -> None:
    SendEmail.enqueue(
        SendEmailPayload(to=["a@example.com", "b@example.com"], template="mail/plain.txt")
    )

    run_burst()

    (sent,) = mail.outbox
    assert sent.to == ["a@example.com", "b@example.com"]
    assert (sent.subject, sent.alternatives) == ("Plain", [])


@pytest.mark.django_db(transaction=True)
def test_send_email__an_unknown_template_fails_at_the_call_site(queued: RedisNamespace) -> None:
    from django.template import TemplateDoesNotExist

    with pytest.raises(TemplateDoesNotExist):
        SendEmail.enqueue(SendEmailPayload(to="a@example.com", template="mail/nope.html"))

    assert pending(queued) == 0


@pytest.mark.django_db(transaction=True)
def test_send_email__an_unknown_template_in_the_worker_is_not_retryable(
    queued: RedisNamespace,
) -> None:
    from django_jobs.jobs import JobContext, SkipRetry

    job = SendEmail(JobContext("t1", 1, 0, "critical", 0))
    with pytest.raises(SkipRetry, match=r"'mail/gone\.html' does not exist"):
        job.run(SendEmailPayload(to="a@example.com", template="mail/gone.html"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("templates")
def test_send_email__goes_to_the_email_queue(
    settings: Any, redis_ns: RedisNamespace, mailoutbox: Any
) -> None:
    queue_mail(settings, EMAIL_QUEUE="low")

    SendEmail.enqueue(SendEmailPayload(to="a@example.com", template="mail/plain.txt"))

    assert (pending(redis_ns, "critical"), pending(redis_ns, "low")) == (0, 1)
