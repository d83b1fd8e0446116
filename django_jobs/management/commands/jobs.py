"""`manage.py jobs`: the queues from a terminal (see docs/cli.rst and django_jobs/cli/).

This module wires the subcommands of django_jobs.cli into one parser and turns the errors an
operator can meet (jobs disabled, Redis down, an unknown queue or schedule, a bad configuration)
into one line on stderr and a non-zero exit, without a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.cli import acting, reading
from django_jobs.cli.registry import Session
from django_jobs.exceptions import (
    BrokerUnavailable,
    JobsDisabled,
    UnknownQueue,
    UnknownSchedule,
)

#: Every subcommand by name, in the order `manage.py jobs --help` lists them.
SUBCOMMANDS = {sub.name: sub for sub in (*reading.SUBCOMMANDS, *acting.SUBCOMMANDS)}


class Command(BaseCommand):
    help = (
        "Inspect and act on django-jobs queues: stats, ls, show, retry, delete, cancel, pause, "
        "resume, purge, schedules. Every subcommand takes --json; destructive ones ask first "
        "unless --yes."
    )
    #: Where the confirmation prompt reads (call_command(..., stdin=...) in tests).
    stealth_options = ("stdin",)
    #: An operator's tool: its errors say what is wrong in one line (a bad JOBS entry too, as
    #: the checks would), without the checks' notes around it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(
            dest="subcommand", required=True, metavar="subcommand", title="subcommands"
        )
        for sub in SUBCOMMANDS.values():
            sub.add_to(subparsers.add_parser(sub.name, help=sub.help, description=sub.help))

    def handle(self, *args: Any, **options: Any) -> None:
        session = Session(
            out=self.stdout,
            err=self.stderr,
            stdin=options.get("stdin") or sys.stdin,
            json=options.get("json", False),
            yes=options.get("yes", False),
        )
        try:
            SUBCOMMANDS[options["subcommand"]].run(session, options)
        except JobsDisabled as exc:
            raise CommandError(
                "Jobs are disabled: JOBS['REDIS_URL'] is not set, so there are no queues to "
                "show. Set REDIS_URL (for example redis://127.0.0.1:6379/0) and run it again."
            ) from exc
        except BrokerUnavailable as exc:
            raise CommandError(" ".join(str(exc).split())) from exc
        except (UnknownQueue, UnknownSchedule, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except ImproperlyConfigured as exc:  # a bad JOBS entry, such as a schedule
            raise CommandError(
                f"The jobs configuration is broken: {exc} (`manage.py check` lists all)."
            ) from exc
        except BrokenPipeError:
            # The reader left (`manage.py jobs ls dead | head`): stop quietly, as a Unix tool
            # does, pointing stdout at /dev/null so that the flush at exit cannot fail again.
            stdout = sys.stdout
            if getattr(self.stdout, "_out", None) is stdout and stdout is not None:
                with contextlib.suppress(OSError, ValueError):
                    os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
            raise SystemExit(1) from None
