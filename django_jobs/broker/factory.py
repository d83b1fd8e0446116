"""`get_broker()`: the one RedisBroker of this process for the current settings."""

from __future__ import annotations

from django.views.decorators.debug import sensitive_variables

from django_jobs.broker.connection import connect
from django_jobs.broker.redis import RedisBroker
from django_jobs.conf import JobsSettings, get_settings
from django_jobs.exceptions import JobsDisabled

_broker: tuple[JobsSettings, RedisBroker] | None = None


@sensitive_variables("settings")  # its redis_url may hold a password (Django's debug page)
def get_broker() -> RedisBroker:
    """Return the broker for the current settings (one client per process and settings).

    Raises JobsDisabled when REDIS_URL is not set, whatever WHEN_DISABLED says: the admin, the
    API, the worker and JobHandle.refresh need Redis itself.
    """
    global _broker
    settings = get_settings()
    if _broker is None or _broker[0] is not settings:
        if not settings.enabled:
            raise JobsDisabled(
                f'Jobs are disabled: JOBS["REDIS_URL"] is not set, so there is no Redis to talk '
                f'to (JOBS["WHEN_DISABLED"] is {settings.when_disabled!r}, which decides only '
                f"what enqueue does). Set REDIS_URL (for example redis://127.0.0.1:6379/0) to "
                f"enable jobs."
            )
        assert settings.redis_url is not None
        client = connect(settings.redis_url, settings.enqueue_timeout)
        _broker = (settings, RedisBroker(client, settings))
    return _broker[1]
