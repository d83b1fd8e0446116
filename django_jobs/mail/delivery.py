"""The jobs that send mail from the worker, through the backend that really sends.

- `DeliverEmail`: one message queued by `QueuedEmailBackend`, rebuilt and sent as it was built.
- `SendEmail`: a message rendered from a template (blocks ``subject``, ``text``, ``html``).

Both send at most once per task through `once()`: the processed-tasks row of the task commits
right after the backend accepted the message, so a worker killed after that, before the ack,
does not send it again. The window that remains is between the SMTP server accepting the
message and that commit (see docs/email.rst).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core import mail as django_mail
from django.core.mail import EmailMessage, EmailMultiAlternatives
from django.core.mail.backends.base import BaseEmailBackend
from django.template import Context, TemplateDoesNotExist, loader
from django.template.base import Template as DjangoTemplate
from django.template.loader_tags import BlockNode, ExtendsNode
from django.utils.module_loading import import_string

from django_jobs.conf import QUEUED_BACKEND, get_settings
from django_jobs.exceptions import MailNotConfigured
from django_jobs.idempotency import once
from django_jobs.jobs import Job, SkipRetry
from django_jobs.mail.serialize import message_from_dict

logger = logging.getLogger("django_jobs.mail")
#: django.core.mail.mailers (Django 6.1+), where MAILERS aliases are looked up.
_MAILERS: Any = getattr(django_mail, "mailers", None)


def _is_queued(backend: object) -> bool:
    cls = type(backend)
    return f"{cls.__module__}.{cls.__qualname__}".startswith("django_jobs.mail.")


def _mailers_config() -> dict[str, Any] | None:
    """MAILERS (Django 6.1+), or None when the project uses EMAIL_BACKEND."""
    mailers = getattr(django_settings, "MAILERS", None)
    return mailers if isinstance(mailers, dict) else None


def real_connection(mailer: str | None = None) -> BaseEmailBackend:
    """A connection of the backend that really sends: MAILERS[mailer] (Django 6.1+), else the
    target of the default queued mailer, else JOBS["EMAIL_BACKEND"], else EMAIL_BACKEND."""
    config = _mailers_config()
    if mailer is None and config is not None:
        default = config.get("default", {})
        if default.get("BACKEND") != QUEUED_BACKEND:
            mailer = "default"
        else:
            mailer = (default.get("OPTIONS") or {}).get("mailer")
    if mailer is not None:
        if config is None or _MAILERS is None or mailer not in config:
            raise MailNotConfigured(
                f"Queued mail names the mailer {mailer!r}, which MAILERS does not define. "
                f"Add it to MAILERS with the backend that really sends."
            )
        connection: BaseEmailBackend = _MAILERS[mailer]
    else:
        path = get_settings().email_backend or getattr(django_settings, "EMAIL_BACKEND", None)
        if not path or path == QUEUED_BACKEND:
            raise MailNotConfigured()
        connection = import_string(path)()
    if _is_queued(connection):
        raise MailNotConfigured(
            "The backend that should really send queued mail is the queued backend itself: "
            "the mail would never leave. Point the queued mailer at SMTP (or the like)."
        )
    return connection


def mail_key(job_id: str) -> str:
    """The ProcessedTask key of the mail sent by task `job_id`."""
    return f"mail:{job_id}"


def deliver(message: EmailMessage, key: str, mailer: str | None = None) -> bool:
    """Send `message` through the real backend, once per `key`; False if it was sent before.

    The key commits right after the backend returned: a failure before rolls it back (the task
    retries and sends), a crash after finds it (the task is acknowledged, nothing is sent).
    """
    with once(key) as first:
        if first:
            with real_connection(mailer) as connection:
                connection.send_messages([message])
    return first


@dataclass(frozen=True)
class EmailPayload:
    """A queued EmailMessage (see serialize.py) and the mailer alias that sends it, if named."""

    message: dict[str, Any]
    mailer: str | None = None


class DeliverEmail(Job[EmailPayload]):
    """Send one message queued by QueuedEmailBackend."""

    name = "django_jobs.DeliverEmail"
    queue = "critical"

    def run(self, payload: EmailPayload) -> None:
        message = message_from_dict(payload.message)
        if not deliver(message, mail_key(self.context.job_id), payload.mailer):
            logger.info(
                "mail %s of task %s was sent by an earlier run: not sent again",
                message.extra_headers.get("Message-ID", "?"), self.context.job_id,
            )  # fmt: skip


@dataclass(frozen=True)
class SendEmailPayload:
    """A templated mail: `to` is one address or a list; `data` is the template's context."""

    to: str | list[str]
    template: str
    data: dict[str, Any] = field(default_factory=dict)


def _blocks(template: DjangoTemplate, context: Context) -> dict[str, BlockNode]:
    """The template's blocks by name, a child's overriding its parents' ({% extends %})."""
    blocks: dict[str, BlockNode] = {}
    current: DjangoTemplate | None = template
    while current is not None:
        for node in current.nodelist.get_nodes_by_type(BlockNode):
            assert isinstance(node, BlockNode)
            blocks.setdefault(node.name, node)
        extends = current.nodelist.get_nodes_by_type(ExtendsNode)
        parent = extends[0] if extends else None
        current = parent.get_parent(context) if isinstance(parent, ExtendsNode) else None
    return blocks


def render_blocks(template_name: str, data: dict[str, Any]) -> tuple[str, str, str | None]:
    """(subject, text, html) from the template's blocks; subject and text are not escaped.

    Raises SkipRetry (the task goes dead at once) when the template does not exist or lacks a
    subject or text block.
    """
    try:
        template = loader.get_template(template_name)
    except TemplateDoesNotExist as exc:
        raise SkipRetry(
            f"email template {template_name!r} does not exist ({exc}); no retry can find it: "
            f"check the name and that this worker runs the code that has it"
        ) from exc
    source: DjangoTemplate = template.template  # type: ignore[attr-defined]
    rendered: dict[str, str] = {}
    for name, autoescape in (("subject", False), ("text", False), ("html", True)):
        context = Context(data, autoescape=autoescape)
        with context.bind_template(source):
            block = _blocks(source, context).get(name)
            if block is not None:
                rendered[name] = block.nodelist.render(context)
    missing = [name for name in ("subject", "text") if name not in rendered]
    if missing:
        raise SkipRetry(
            f"email template {template_name!r} has no {' or '.join(missing)} block: give it "
            f"{{% block subject %}}, {{% block text %}} and optionally {{% block html %}}"
        )
    subject = " ".join(rendered["subject"].split())  # one line: a header
    return subject, rendered["text"].strip() + "\n", rendered.get("html")


class SendEmail(Job[SendEmailPayload]):
    """Render a template's subject, text and html blocks with `data` and send the mail."""

    name = "django_jobs.SendEmail"
    queue = "critical"

    def run(self, payload: SendEmailPayload) -> None:
        subject, text, html = render_blocks(payload.template, payload.data)
        to = [payload.to] if isinstance(payload.to, str) else list(payload.to)
        message = EmailMultiAlternatives(subject=subject, body=text, to=to)
        if html is not None:
            message.attach_alternative(html, "text/html")
        if not deliver(message, mail_key(self.context.job_id)):
            logger.info("mail of task %s was sent by an earlier run: not sent again",
                        self.context.job_id)  # fmt: skip

    @classmethod
    def default_queue(cls) -> str:
        """JOBS["EMAIL_QUEUE"], unless an enqueue names another queue."""
        return get_settings().email_queue

    @classmethod
    def check_payload(cls, payload: SendEmailPayload) -> None:
        """The template exists here: TemplateDoesNotExist at the call site, not a dead task."""
        loader.get_template(payload.template)
