"""Mail through a real worker: a view's send returns without SMTP; the worker delivers it over
SMTP with every part intact (the MIME bytes compared)."""

from __future__ import annotations

import email
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.mail import EmailMessage
from django.test import Client

from django_jobs.mail import EmailPayload
from django_jobs.mail.serialize import message_to_dict
from testproject.probes.jobs import DeliverThenCrash
from testproject.probes.mail import full_message
from tests.acceptance.conftest import ROOT, Worker, done, probe
from tests.conftest import RedisNamespace, wait_until
from tests.mailing import MAILERS, SmtpSink, mime, queue_mail, same_boundaries

SMTP = "django.core.mail.backends.smtp.EmailBackend"


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    server = SmtpSink().start()
    yield server
    server.stop()


def smtp_worker_env(monkeypatch: pytest.MonkeyPatch, sink: SmtpSink, tmp_path: Path) -> None:
    """Point the worker's real mailer at the sink and migrate its database (the worker fixture
    uses tmp_path / worker.sqlite3; its settings come from the environment)."""
    monkeypatch.setenv("EMAIL_BACKEND", SMTP)
    monkeypatch.setenv("EMAIL_HOST", "127.0.0.1")
    monkeypatch.setenv("EMAIL_PORT", str(sink.port))
    migrate = {"DATABASE_URL": f"sqlite:///{tmp_path / 'worker.sqlite3'}"}
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
        cwd=ROOT, env={**os.environ, **migrate}, check=True,
    )  # fmt: skip


def test_queued_mail__a_view_returns_without_smtp_and_the_worker_delivers_every_part(
    worker: Worker,
    redis_ns: RedisNamespace,
    sink: SmtpSink,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    queue_mail(settings, real=SMTP, alias="send")  # as testproject/settings.py names it
    smtp_worker_env(monkeypatch, sink, tmp_path)

    response = Client().get("/probes/mail/")

    assert response.content == b"queued 1"
    assert sink.connections == 0  # the request did not touch SMTP
    worker.start("--concurrency", "1")
    wait_until(lambda: sink.messages, timeout=30, why=worker.output)
    (received,) = sink.messages
    expected = full_message()
    assert received.mail_from == "<shop@example.com>"
    assert sorted(received.rcpt_to) == sorted(f"<{a.split('<')[-1].strip('>')}>"
                                              for a in expected.recipients())  # fmt: skip
    headers = email.message_from_bytes(received.data)
    expected.extra_headers.update(Date=headers["Date"], **{"Message-ID": headers["Message-ID"]})
    assert same_boundaries(received.data) == mime(expected)


def test_queued_mail__a_worker_killed_after_the_send_does_not_send_again(
    worker: Worker,
    redis_ns: RedisNamespace,
    sink: SmtpSink,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    smtp_worker_env(monkeypatch, sink, tmp_path)
    message = EmailMessage("Once", "only once", to=["ada@example.com"])
    mailer = "send" if MAILERS else None  # before 6.1: JOBS["EMAIL_BACKEND"]
    DeliverThenCrash.enqueue(EmailPayload(message_to_dict(message), mailer))

    worker.start("--concurrency", "1")

    wait_until(lambda: done(redis_ns), timeout=30, why=worker.output)
    runs = [r.decode() for r in redis_ns.client.lrange(probe(redis_ns, "runs"), 0, -1)]
    assert runs == ["mail:1", "mail:1"], worker.output()  # killed once, then ran again
    assert done(redis_ns) == ["mail:1:1"]
    assert [m.rcpt_to for m in sink.messages] == [["<ada@example.com>"]]  # sent once
