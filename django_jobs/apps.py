"""App configuration: registers the system checks, discovers `jobs.py` and `flows.py` modules,
and keeps the Redis URL off Django's debug page."""

from __future__ import annotations

import re

import django
from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.views.debug import SafeExceptionReporterFilter

#: Setting names (at any depth, such as JOBS["REDIS_URL"]) that Django's debug page must hide:
#: a Redis URL may carry a password, and Django hides only names like API, KEY, PASS or TOKEN.
SENSITIVE = "REDIS_URL"


def hide_redis_urls() -> None:
    """Add REDIS_URL to the setting names Django's default exception reporter filter hides.

    Django's SafeExceptionReporterFilter hides settings whose name matches its `hidden_settings`
    pattern, and JOBS["REDIS_URL"] matches none of its words. Extending the class's pattern
    covers the default filter and every project filter that subclasses it without a pattern of
    its own; a project filter that sets its own pattern keeps it (its choice). Idempotent.
    """
    pattern = SafeExceptionReporterFilter.hidden_settings
    if not pattern.search(SENSITIVE):
        SafeExceptionReporterFilter.hidden_settings = re.compile(
            f"{pattern.pattern}|{SENSITIVE}", pattern.flags
        )


class DjangoJobsConfig(AppConfig):
    """django-jobs as an installed app."""

    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register checks, hide Redis URLs from the debug page and import every installed
        app's `jobs` and `flows` modules."""
        # Registers the checks, the mail jobs and the flows' event job.
        from django_jobs import checks, flows, mail  # noqa: F401

        if django.VERSION >= (6, 0):  # the job that runs Django's @task functions
            from django_jobs import tasks  # noqa: F401

        hide_redis_urls()
        autodiscover_modules("jobs")
        autodiscover_modules("flows")
