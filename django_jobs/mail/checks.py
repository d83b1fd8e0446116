"""System checks of queued mail (django_jobs.E014 for the default queue, django_jobs.E015).

Registered when django_jobs.mail is imported (the app does at start-up). They read settings only:
a queued mailer must name a mailer that exists and really sends, never itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, register

from django_jobs.conf import QUEUED_BACKEND, raw_settings, settings_errors


def _error(id_: int, msg: str, hint: str) -> Error:
    return Error(msg, hint=hint, id=f"django_jobs.E{id_:03d}")


def mail_is_queued() -> bool:
    """Whether any mailer (or EMAIL_BACKEND) is the queued backend."""
    mailers = getattr(django_settings, "MAILERS", None)
    if isinstance(mailers, dict):
        return any(isinstance(c, dict) and c.get("BACKEND") == QUEUED_BACKEND
                   for c in mailers.values())  # fmt: skip
    return getattr(django_settings, "EMAIL_BACKEND", None) == QUEUED_BACKEND


def mailer_errors() -> list[Error]:
    """Problems with queued mailers in MAILERS (Django 6.1+) or the legacy EMAIL_BACKEND."""
    mailers = getattr(django_settings, "MAILERS", None)
    if not isinstance(mailers, dict):
        legacy = getattr(django_settings, "EMAIL_BACKEND", None)
        if legacy == QUEUED_BACKEND and not raw_settings().get("EMAIL_BACKEND"):
            return [
                _error(
                    15,
                    "EMAIL_BACKEND is the queued backend, but JOBS['EMAIL_BACKEND'] does not "
                    "name the backend that really sends: the worker would have nothing to "
                    "send with.",
                    "Set JOBS['EMAIL_BACKEND'] = 'django.core.mail.backends.smtp.EmailBackend' "
                    "(or the backend you used before).",
                )
            ]
        return []
    errors = []
    for alias, config in mailers.items():
        if not isinstance(config, dict) or config.get("BACKEND") != QUEUED_BACKEND:
            continue
        target = (config.get("OPTIONS") or {}).get("mailer")
        target_config = mailers.get(target) if isinstance(target, str) else None
        if target is None and raw_settings().get("EMAIL_BACKEND"):
            continue  # the legacy setting names the real backend
        if target_config is None:
            problem = (
                "names no mailer" if target is None else f"names {target!r}, which MAILERS lacks"
            )
        elif target == alias or target_config.get("BACKEND") == QUEUED_BACKEND:
            problem = f"names {target!r}, a queued mailer: the mail would never leave"
        else:
            continue
        errors.append(
            _error(
                15,
                f"MAILERS[{alias!r}] is the queued backend and its OPTIONS['mailer'] {problem}.",
                f'Add "OPTIONS": {{"mailer": "smtp"}} to MAILERS[{alias!r}] and a mailer '
                f'"smtp" with the backend that really sends, e.g. '
                f'{{"BACKEND": "django.core.mail.backends.smtp.EmailBackend"}}.',
            )
        )
    return errors


@register("django_jobs")
def check_mailers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check that queued mail has a real backend to leave through, on a configured queue."""
    if not mail_is_queued() or settings_errors():
        return []
    errors: list[CheckMessage] = list(mailer_errors())
    raw = raw_settings()
    if raw["EMAIL_QUEUE"] not in raw["QUEUES"]:
        errors.append(
            _error(
                14,
                f"Mail is queued on {raw['EMAIL_QUEUE']!r} (JOBS['EMAIL_QUEUE']), which is not "
                f"one of JOBS['QUEUES'].",
                "Set JOBS['EMAIL_QUEUE'] to one of the configured queues.",
            )
        )
    return errors
