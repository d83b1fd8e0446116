"""App configuration: registers the system checks and discovers `jobs.py` modules."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class DjangoJobsConfig(AppConfig):
    """django-jobs as an installed app."""

    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register checks and import every installed app's `jobs` module."""
        from django_jobs import checks  # noqa: F401  (registers the checks)

        autodiscover_modules("jobs")
