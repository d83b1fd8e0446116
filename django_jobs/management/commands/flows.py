"""`manage.py flows <subcommand>`: tools for flows.

- ``flows check [PATH ...]``: the static lint of the replay rule (django_jobs.flows.lint) over
  the given files or directories, by default the modules of every registered flow class and
  the flows.py of every installed app. Prints one line per finding, ``file:line:col: [rule]
  ...``, and exits with status 1 when anything is flagged (0 when clean).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.flows import registry
from django_jobs.flows.lint import check_paths


def flow_modules() -> list[Path]:
    """The source files of every registered flow class and every installed app's flows.py."""
    files: set[Path] = set()
    for cls in registry.flows.values():
        module = sys.modules.get(cls.__module__)
        source = inspect.getsourcefile(module) if module is not None else None
        if source:
            files.add(Path(source))
    for config in apps.get_app_configs():
        candidate = Path(config.path) / "flows.py"
        if candidate.is_file():
            files.add(candidate)
    return sorted(files)


class Command(BaseCommand):
    help = "Tools for flows. `flows check`: flag calls that break the replay rule outside steps."
    # A lint of source files: the project's system checks (manage.py check) are not its output.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", metavar="subcommand")
        check = sub.add_parser(
            "check",
            help="flag time, randomness, uuids, ORM and HTTP calls made in a Flow's run "
            "outside a step (exit 1 if any)",
        )
        check.add_argument(
            "paths",
            nargs="*",
            help="files or directories (default: the modules of every registered flow)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("subcommand") != "check":
            raise CommandError("Give a subcommand: `manage.py flows check [PATH ...]`.")
        given = [Path(p) for p in options["paths"]]
        missing = [str(p) for p in given if not p.exists()]
        if missing:
            raise CommandError(f"No such file or directory: {', '.join(missing)}")
        paths = given or flow_modules()
        try:
            findings = list(check_paths(paths))
        except SyntaxError as exc:
            raise CommandError(f"{exc.filename}:{exc.lineno}: cannot parse: {exc.msg}") from exc
        for finding in findings:
            self.stdout.write(str(finding))
        if findings:
            count = len(findings)
            self.stderr.write(
                f"{count} call{'s' if count != 1 else ''} outside steps would differ between "
                f"replays: move each into a step (see docs/flows.rst, the replay rule)."
            )
            sys.exit(1)
        self.stdout.write(f"Flows check: {len(paths)} file(s), nothing flagged.")
