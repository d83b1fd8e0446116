"""Per-call connection options cannot ride the queue: refused by name, not dropped silently.

Found by review: send_mail(auth_user=..., auth_password=...) through the queued backend queued
the mail and the worker sent it with the real backend's own account.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.core.mail import send_mail

from tests.conftest import RedisNamespace
from tests.integration.test_mail import pending, queued  # noqa: F401 (a fixture)

# Django 6.1 deprecates auth_user/auth_password and get_connection() (MAILERS' OPTIONS replace
# them); projects on 5.2 and 6.0 still call them, and the refusal must hold on each.
DEPRECATED = "ignore:.*deprecated"


@pytest.mark.filterwarnings(DEPRECATED)
@pytest.mark.django_db(transaction=True)
def test_queued_backend__per_call_credentials_are_refused_by_name(
    queued: RedisNamespace,  # noqa: F811
) -> None:
    with pytest.raises(TypeError, match="cannot carry password, username to the worker"):
        send_mail("Hi", "Body", None, ["ada@example.com"], auth_user="me", auth_password="pw")

    assert pending(queued) == 0
    assert send_mail("Hi", "Body", None, ["ada@example.com"]) == 1  # without them: queued
    assert pending(queued) == 1
    assert mail.outbox == []


@pytest.mark.filterwarnings(DEPRECATED)
def test_queued_backend__a_connection_of_its_own_takes_no_smtp_options(settings: Any) -> None:
    from tests.mailing import queue_mail

    queue_mail(settings)
    with pytest.raises(TypeError, match="cannot carry host, port"):
        mail.get_connection(host="smtp.example.com", port=2525)
