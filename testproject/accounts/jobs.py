"""The demo's jobs: the welcome mail leaves the request path."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.mail import send_mail

from django_jobs import Job


@dataclass(frozen=True)
class WelcomePayload:
    user_id: int


class SendWelcomeEmail(Job[WelcomePayload]):
    """Send the welcome mail to a new user (at most once per user, by idempotency key)."""

    queue = "critical"

    def run(self, payload: WelcomePayload) -> None:
        user = get_user_model().objects.filter(pk=payload.user_id).first()
        if user is None or not user.email:
            return  # deleted since, or no address: nothing to send
        send_mail(
            "Welcome to the django-jobs demo",
            f"Hello {user.get_username()}, this mail was sent by a worker, not by your request.",
            None,
            [user.email],
        )
