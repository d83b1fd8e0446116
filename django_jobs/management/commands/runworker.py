"""`manage.py runworker`: run the jobs worker."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_jobs.conf import get_settings


class Command(BaseCommand):
    help = "Run a django-jobs worker: fetch jobs from Redis and run them."

    def handle(self, *args: Any, **options: Any) -> None:
        settings = get_settings()
        if not settings.enabled:
            self.stdout.write(
                "Jobs are disabled: JOBS['REDIS_URL'] is not set, so there is nothing to work "
                f"on (enqueue runs jobs {settings.when_disabled!r} meanwhile). To enable jobs, "
                "set REDIS_URL in the environment (for example REDIS_URL=redis://127.0.0.1:6379/0) "
                "and start the worker again."
            )
            return
        self.stderr.write("The worker is not built yet; see issue 4.")
