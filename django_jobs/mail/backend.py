"""`QueuedEmailBackend`: every message sent through it becomes one job, and sending returns.

Django 6.1+ (MAILERS)::

    MAILERS = {
        "default": {
            "BACKEND": "django_jobs.mail.QueuedEmailBackend",
            "OPTIONS": {"mailer": "smtp"},      # the alias that really sends; "queue" optional
        },
        "smtp": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": {...}},
    }

Before 6.1 (or without MAILERS)::

    EMAIL_BACKEND = "django_jobs.mail.QueuedEmailBackend"
    JOBS = {..., "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend

from django_jobs.conf import get_settings
from django_jobs.exceptions import JobsError, PayloadTooLarge
from django_jobs.mail.delivery import DeliverEmail, EmailPayload
from django_jobs.mail.serialize import message_to_dict

logger = logging.getLogger("django_jobs.mail")

#: Per-call options of a real connection (send_mail's auth_user/auth_password, SMTP options):
#: they would not reach the worker, whose real backend sends with its own configuration.
CONNECTION_OPTIONS = frozenset(
    {"username", "password", "host", "port", "use_tls", "use_ssl", "timeout", "ssl_keyfile",
     "ssl_certfile"}
)  # fmt: skip


class QueuedEmailBackend(BaseEmailBackend):
    """Queue each message as a `DeliverEmail` job (one per message, one Redis round trip per
    call); the worker sends it through the real backend.

    Options: `mailer` (Django 6.1+: the MAILERS alias that really sends), `queue` (default
    JOBS["EMAIL_QUEUE"], "critical"). A message larger than JOBS["MAX_PAYLOAD_BYTES"] raises
    PayloadTooLarge here, at send time, even with fail_silently.
    """

    def __init__(
        self, *args: Any, mailer: str | None = None, queue: str | None = None, **kwargs: Any
    ) -> None:
        given = sorted(k for k, v in kwargs.items() if k in CONNECTION_OPTIONS and v is not None)
        if given:
            raise TypeError(
                f"QueuedEmailBackend cannot carry {', '.join(given)} to the worker, which sends "
                "through the real backend as it is configured: set them there (the mailer's "
                "OPTIONS, or JOBS['EMAIL_BACKEND']'s settings), or pass a connection of the "
                "real backend to send_mail() to send at once, outside the queue."
            )
        super().__init__(*args, **kwargs)
        self.mailer = mailer
        self.queue = queue

    def _silent(self) -> bool:
        # Django 6.1 keeps the flag in _fail_silently (reading fail_silently warns), 5.2 in
        # fail_silently.
        values = vars(self)
        return bool(values.get("_fail_silently", values.get("fail_silently", False)))

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        messages = [m for m in email_messages if m.recipients()]
        if not messages:
            return 0
        payloads = [EmailPayload(message_to_dict(m), self.mailer) for m in messages]
        queue = self.queue or get_settings().email_queue
        try:
            DeliverEmail.enqueue_many(payloads, queue=queue)
        except PayloadTooLarge:
            raise  # the message itself is the problem: never silent
        except JobsError:
            if not self._silent():
                raise
            logger.exception("could not queue %d mail(s) (fail_silently)", len(messages))
            return 0
        return len(messages)
