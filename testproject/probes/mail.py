"""A mail with one of everything, for the tests that check every part survives the queue."""

from email.message import MIMEPart
from email.mime.text import MIMEText

import django
from django.core.mail import EmailMessage, EmailMultiAlternatives


def full_message() -> EmailMultiAlternatives:
    """Subject and body with non-ASCII text, from, to, cc, bcc, reply-to, extra headers, an HTML
    alternative, text and binary attachments, an attached message and a MIME part."""
    inner = EmailMessage(
        subject="inner", body="forwarded", to=["x@example.com"],
        headers={"Date": "Tue, 01 Dec 2026 08:00:00 +0000", "Message-ID": "<inner@example.com>"},
    )  # fmt: skip
    message = EmailMultiAlternatives(
        subject="Grüße, Ada - your order",
        body="Plain body\nwith two lines, ünïcode.\n",
        from_email="Shop <shop@example.com>",
        to=["ada@example.com", "Bob <bob@example.com>"],
        cc=["cc@example.com"],
        bcc=["hidden@example.com"],
        reply_to=["support@example.com"],
        headers={"X-Order": "42", "List-Unsubscribe": "<https://example.com/u>"},
    )
    message.attach_alternative("<p>HTML <b>body</b> &amp; more</p>", "text/html")
    message.attach("notes.txt", "some text\n", "text/plain")
    message.attach("pixel.png", bytes(range(256)) * 4, "image/png")
    message.attach("inner.eml", inner, "message/rfc822")
    if django.VERSION >= (6, 0):
        part = MIMEPart()
        part.set_content(b"\x00\x01binary", maintype="application", subtype="octet-stream")
        part.add_header("Content-Disposition", "attachment", filename="raw.bin")
        message.attach(part)
    else:  # before 6.0 Django attaches MIMEBase objects as they are
        legacy = MIMEText("legacy part", "plain", "utf-8")
        legacy.add_header("Content-Disposition", "attachment", filename="legacy.txt")
        message.attach(legacy)
    return message
