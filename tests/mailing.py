"""Helpers of the mail tests: route mail through the queue, compare MIME bytes, an SMTP sink."""

from __future__ import annotations

import email.policy
import re
import socketserver
import threading
from dataclasses import dataclass, field
from typing import Any

import django
from django.core.mail import EmailMessage

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
QUEUED = "django_jobs.mail.QueuedEmailBackend"
MAILERS = django.VERSION >= (6, 1)
BOUNDARY = re.compile(rb"={15}\d+==")


def queue_mail(settings: Any, real: str = LOCMEM, alias: str = "real", **jobs: Any) -> None:
    """Route mail through the queue to the `real` backend (MAILERS[alias]), in this Django's
    style."""
    if MAILERS:
        settings.MAILERS = {
            "default": {"BACKEND": QUEUED, "OPTIONS": {"mailer": alias}},
            alias: {"BACKEND": real},
        }
    else:
        settings.EMAIL_BACKEND = QUEUED
        jobs.setdefault("EMAIL_BACKEND", real)
    settings.JOBS = {**settings.JOBS, **jobs}


def mime(message: EmailMessage) -> bytes:
    """The bytes Django's SMTP backend sends for the message, boundaries made equal."""
    if django.VERSION >= (6, 0):
        raw = message.message(policy=email.policy.SMTP).as_bytes()
    else:
        raw = message.message().as_bytes(linesep="\r\n")
    return same_boundaries(raw)


def same_boundaries(raw: bytes) -> bytes:
    """MIME bytes with every multipart boundary (random per rendering) replaced by one word."""
    return BOUNDARY.sub(b"BOUNDARY", raw).rstrip(b"\r\n")


@dataclass
class Received:
    mail_from: str
    rcpt_to: list[str]
    data: bytes


@dataclass
class SmtpSink:
    """A minimal SMTP server on a free port that keeps every message it is given."""

    connections: int = 0
    messages: list[Received] = field(default_factory=list)
    server: socketserver.ThreadingTCPServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def start(self) -> SmtpSink:
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self) -> None:
                sink.connections += 1
                self.reply("220 sink")
                mail_from, rcpt_to = "", []
                while line := self.rfile.readline():
                    verb = line[:4].upper()
                    if verb in (b"EHLO", b"HELO"):
                        self.reply("250 sink")
                    elif verb == b"MAIL":
                        mail_from, rcpt_to = line.decode().split(":", 1)[1].strip(), []
                        self.reply("250 ok")
                    elif verb == b"RCPT":
                        rcpt_to.append(line.decode().split(":", 1)[1].strip())
                        self.reply("250 ok")
                    elif verb == b"DATA":
                        self.reply("354 go on")
                        lines = []
                        while (data := self.rfile.readline()) not in (b".\r\n", b""):
                            lines.append(data[1:] if data.startswith(b"..") else data)
                        sink.messages.append(Received(mail_from, rcpt_to, b"".join(lines)))
                        self.reply("250 kept")
                    elif verb == b"QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 ok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
