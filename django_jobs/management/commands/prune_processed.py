"""`manage.py prune_processed`: delete ProcessedTask rows past their retention, in batches.

For projects that prune from cron instead of (or besides) the worker's janitor. Each batch is
its own short transaction, so the command can run at any time beside live traffic.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.conf import get_settings
from django_jobs.idempotency import PRUNE_BATCH, prune_aliases, prune_batch


class Command(BaseCommand):
    help = (
        "Delete processed-task rows (once(), atomic jobs, mail) older than "
        "JOBS['PROCESSED_RETENTION'], in batches of short transactions."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database", action="append", help="database alias (default: every one allowed)"
        )
        parser.add_argument("--batch-size", type=int, default=PRUNE_BATCH, help="rows per batch")
        parser.add_argument(
            "--older-than", type=float, help="seconds (default: JOBS['PROCESSED_RETENTION'])"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be 1 or more.")
        older_than = options["older_than"]
        if older_than is not None and older_than < 0:
            raise CommandError("--older-than must be 0 or more seconds.")
        retention = get_settings().processed_retention if older_than is None else older_than
        aliases = options["database"] or prune_aliases()
        for alias in aliases:
            started = time.monotonic()
            batches = total = 0
            while True:
                deleted = prune_batch(retention, batch_size=options["batch_size"], using=alias)
                total += deleted
                if deleted:
                    batches += 1
                if deleted < options["batch_size"]:
                    break
            self.stdout.write(
                f"{alias}: deleted {total} processed tasks older than "
                f"{timedelta(seconds=retention)} in {batches} batches "
                f"({time.monotonic() - started:.1f}s)"
            )
