"""An EmailMessage as JSON and back, every part intact, so the worker sends what the caller built.

Kept: subject, body, from, to, cc, bcc, reply-to, extra headers, alternatives, attachments
(name/content/type triples, MIME parts, attached messages), the content subtype and encoding
(and, before Django 6.0, the mixed and alternative subtypes). The Date and Message-ID headers
are fixed when the message is queued, as Django would have set them at send time, so the mail
the worker sends carries the time it was sent by the caller and one Message-ID whatever happens
to the task. Bytes travel as base64, MIME parts as their bytes.

A subclass of EmailMessage is rebuilt as EmailMessage (or EmailMultiAlternatives when it has
alternatives) with the same fields: behaviour a subclass adds in `message()` is not carried.
"""

from __future__ import annotations

import base64
import email
import email.policy
from datetime import UTC, datetime
from email.message import Message
from email.mime.base import MIMEBase
from email.utils import format_datetime, formatdate, make_msgid
from typing import Any

import django
from django.conf import settings
from django.core.mail import EmailMessage, EmailMultiAlternatives
from django.core.mail.message import EmailAlternative, EmailAttachment
from django.core.mail.utils import DNS_NAME
from django.utils.encoding import force_str
from django.utils.timezone import get_current_timezone

#: Django 6.0 builds messages with the modern email API (MIMEPart attachments, policies).
MODERN = django.VERSION >= (6, 0)
#: Attributes only older Djangos read (Django 6.0 refuses them).
LEGACY_SUBTYPES = ("mixed_subtype", "alternative_subtype")


def _date() -> str:
    """The Date header Django would write now (the same format on each version)."""
    if not MODERN:
        return formatdate(localtime=settings.EMAIL_USE_LOCALTIME)
    tz = get_current_timezone() if settings.EMAIL_USE_LOCALTIME else UTC
    return format_datetime(datetime.now(tz))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _value(content: Any) -> dict[str, Any]:
    """One attachment's or alternative's content, tagged by kind."""
    if isinstance(content, str):
        return {"str": content}
    if isinstance(content, bytes | bytearray | memoryview):
        return {"bytes": _b64(bytes(content))}
    if isinstance(content, EmailMessage):
        return {"email": message_to_dict(content)}
    if isinstance(content, Message):
        return {"mime": _b64(content.as_bytes())}
    return {"str": force_str(content)}


def _content(value: dict[str, Any]) -> Any:
    if "str" in value:
        return value["str"]
    if "bytes" in value:
        return base64.b64decode(value["bytes"])
    if "email" in value:
        return message_from_dict(value["email"])
    return _part(base64.b64decode(value["mime"]))


def _attachment(attachment: Any) -> dict[str, Any]:
    if isinstance(attachment, Message):  # a MIME part (or, before 6.0, a MIMEBase)
        return {"part": _b64(attachment.as_bytes())}
    filename, content, mimetype = attachment
    return {"filename": filename, "content": _value(content), "mimetype": mimetype}


def _part(data: bytes) -> Message:
    """A MIME part from its bytes, of the kind this Django attaches as is."""
    if MODERN:
        return email.message_from_bytes(data, policy=email.policy.default)
    return _legacy_part(email.message_from_bytes(data))


def _legacy_part(parsed: Message) -> MIMEBase:
    """A parsed part as the MIMEBase that Django before 6.0 requires, headers and payload as
    they were (the payload keeps its transfer encoding)."""
    part = MIMEBase(parsed.get_content_maintype(), parsed.get_content_subtype())
    for name in list(part.keys()):
        del part[name]
    for name, value in parsed.items():
        part[name] = value
    payload = parsed.get_payload()
    if parsed.is_multipart():
        part.set_payload([_legacy_part(p) for p in payload if isinstance(p, Message)])
    else:
        part.set_payload(payload)
    part.preamble, part.epilogue = parsed.preamble, parsed.epilogue
    return part


def message_to_dict(message: EmailMessage) -> dict[str, Any]:
    """Everything needed to rebuild `message`, as JSON values; Date and Message-ID fixed now."""
    headers = {str(name): force_str(value) for name, value in message.extra_headers.items()}
    present = {name.lower() for name in headers}
    if "date" not in present:
        headers["Date"] = _date()
    if "message-id" not in present:
        headers["Message-ID"] = make_msgid(domain=DNS_NAME)
    data: dict[str, Any] = {
        "alternatives": isinstance(message, EmailMultiAlternatives),
        "subject": force_str(message.subject),
        "body": force_str(message.body),
        "from_email": force_str(message.from_email),
        "to": [force_str(a) for a in message.to],
        "cc": [force_str(a) for a in message.cc],
        "bcc": [force_str(a) for a in message.bcc],
        "reply_to": [force_str(a) for a in message.reply_to],
        "headers": headers,
        "content_subtype": message.content_subtype,
        "encoding": None if message.encoding is None else str(message.encoding),
        "attachments": [_attachment(a) for a in message.attachments],
        "alternative_parts": [
            {"content": _value(content), "mimetype": mimetype}
            for content, mimetype in getattr(message, "alternatives", [])
        ],
    }
    for name in LEGACY_SUBTYPES:
        if hasattr(message, name):
            data[name] = getattr(message, name)
    return data


def message_from_dict(data: dict[str, Any]) -> EmailMessage:
    """Rebuild the message `message_to_dict` described."""
    cls = EmailMultiAlternatives if data["alternatives"] else EmailMessage
    message = cls(
        subject=data["subject"],
        body=data["body"],
        from_email=data["from_email"],
        to=data["to"],
        cc=data["cc"],
        bcc=data["bcc"],
        reply_to=data["reply_to"],
        headers=dict(data["headers"]),
    )
    message.content_subtype = data["content_subtype"]
    message.encoding = data["encoding"]
    # Set as they were, not through attach(), which would guess and convert again.
    message.attachments = [
        _part(base64.b64decode(a["part"]))
        if "part" in a
        else (EmailAttachment(a["filename"], _content(a["content"]), a["mimetype"]))
        for a in data["attachments"]
    ]
    if isinstance(message, EmailMultiAlternatives):
        message.alternatives = [
            EmailAlternative(_content(a["content"]), a["mimetype"])
            for a in data["alternative_parts"]
        ]
    for name in LEGACY_SUBTYPES:
        if name in data and hasattr(message, name) and getattr(message, name) != data[name]:
            setattr(message, name, data[name])
    return message
