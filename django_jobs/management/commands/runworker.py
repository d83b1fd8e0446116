"""`manage.py runworker`: parse options, build the supervisor, run it."""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.broker.factory import connect
from django_jobs.broker.redis import RedisBroker
from django_jobs.conf import JobsSettings, get_settings
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.metrics import worker as metrics_worker
from django_jobs.worker import reloader
from django_jobs.worker.banner import banner, redis_warnings
from django_jobs.worker.child import WAIT
from django_jobs.worker.scheduler import schedules_off
from django_jobs.worker.supervisor import Supervisor


class Command(BaseCommand):
    help = "Run a django-jobs worker: fetch jobs from Redis and run them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, help="child processes (JOBS CONCURRENCY)")
        parser.add_argument(
            "--async-concurrency", type=int,
            help="tasks each child runs at once on an event loop (JOBS ASYNC_CONCURRENCY)",
        )  # fmt: skip
        parser.add_argument("--queues", help="comma-separated queues, in priority order")
        parser.add_argument("--burst", action="store_true", help="exit once no work is due")
        parser.add_argument("--autoreload", action="store_true", help="restart on code change")
        parser.add_argument("--max-tasks-per-child", type=int, help="recycle children after N")
        parser.add_argument("--shutdown-timeout", type=float, help="seconds to finish on SIGTERM")
        parser.add_argument(
            "--metrics-port", type=int, help="serve Prometheus metrics on this port (0: any)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settings = get_settings()
        if not settings.enabled:
            self.stdout.write(
                "Jobs are disabled: JOBS['REDIS_URL'] is not set, so there is nothing to work "
                f"on (enqueue runs jobs {settings.when_disabled!r} meanwhile). To enable jobs, "
                "set REDIS_URL in the environment (for example REDIS_URL=redis://127.0.0.1:6379/0) "
                "and start the worker again."
            )
            _log_to_stderr()
            schedules_off(settings)
            return
        served = settings.served_queues  # the flows' queue pair too (see docs/flows.rst)
        queues = options["queues"].split(",") if options["queues"] else list(served)
        unknown = [q for q in queues if q not in served]
        if unknown:
            raise CommandError(
                f"Unknown queue(s) {', '.join(unknown)}; configured: {', '.join(served)}."
            )
        concurrency = options["concurrency"] or settings.concurrency
        if concurrency < 1:
            raise CommandError("--concurrency must be 1 or more.")
        if options["async_concurrency"] is not None:
            if options["async_concurrency"] < 1:
                raise CommandError(
                    "--async-concurrency must be 1 or more (1: each child runs one task at a time)."
                )
            settings = dataclasses.replace(settings, async_concurrency=options["async_concurrency"])
        if options["max_tasks_per_child"] is not None:
            settings = dataclasses.replace(
                settings, max_tasks_per_child=options["max_tasks_per_child"]
            )
        if options["autoreload"] and not reloader.is_watched_process():
            _log_to_stderr()
            sys.exit(reloader.run_with_restarts())  # runs this command again, watched
        self.run(settings, queues, concurrency, options)

    def run(
        self, settings: JobsSettings, queues: list[str], concurrency: int, options: Any
    ) -> None:
        _log_to_stderr()
        assert settings.redis_url is not None
        client = connect(settings.redis_url, settings.enqueue_timeout, blocking=WAIT)
        broker = RedisBroker(client, settings)
        for line in banner(broker, queues, concurrency, settings.async_concurrency):
            self.stdout.write(line)
        try:
            with broker.unavailable():
                for warning in redis_warnings(client):
                    self.stderr.write(f"WARNING: {warning}")
        except BrokerUnavailable as exc:
            raise CommandError(str(exc)) from exc
        supervisor = Supervisor(
            broker,
            queues,
            concurrency,
            burst=options["burst"],
            shutdown_timeout=options["shutdown_timeout"],
            async_concurrency=settings.async_concurrency,
        )
        served = None
        if options.get("metrics_port") is not None:
            served = self.serve_metrics(supervisor, options["metrics_port"])
        try:
            if options["autoreload"]:
                sys.exit(reloader.run_watched(supervisor))
            sys.exit(supervisor.run())
        finally:
            if served is not None:
                served.stop()

    def serve_metrics(self, supervisor: Supervisor, port: int) -> metrics_worker.WorkerMetrics:
        """Start the metrics endpoint before the children are forked (docs/metrics.rst)."""
        table, size = supervisor.table, supervisor.concurrency * supervisor.per_child

        def busy() -> int:
            return sum(table.get(i) is not None for i in range(size))

        try:
            served = metrics_worker.start(port, busy, size)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        except OSError as exc:
            raise CommandError(f"--metrics-port {port}: cannot listen ({exc}).") from exc
        self.stdout.write(f"Metrics on http://0.0.0.0:{served.port}/metrics")
        return served


def _log_to_stderr() -> None:
    """Show the worker's INFO lines unless the project's LOGGING already routes them."""
    logger = logging.getLogger("django_jobs")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
