"""What a subcommand of `manage.py jobs` is, and the session it runs in.

A subcommand is one function taking the session and the parsed options, declared with
`@subcommand(help, *arguments)`: adding one is writing that function and listing it in its
module's SUBCOMMANDS. Every subcommand gets `--json`; those
marked destructive get `--yes` too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from django.core.management.base import CommandParser, OutputWrapper

from django_jobs.cli.render import to_json
from django_jobs.inspector import Inspector, get_inspector


@dataclass(frozen=True)
class Argument:
    """One argparse argument: its flags and add_argument's keywords."""

    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Argument:
    """An argument of a subcommand, as `parser.add_argument(*flags, **options)` takes it."""
    return Argument(flags, options)


@dataclass
class Session:
    """One run of `manage.py jobs`: where it writes and reads, and its common flags."""

    out: OutputWrapper
    err: OutputWrapper
    #: Where the confirmation prompt reads its answer (a terminal, or refused without --yes).
    stdin: TextIO
    json: bool = False
    yes: bool = False
    _inspector: Inspector | None = field(default=None, repr=False)

    @property
    def inspector(self) -> Inspector:
        """The Inspector, made at first use (raises JobsDisabled without REDIS_URL)."""
        if self._inspector is None:
            self._inspector = get_inspector()
        return self._inspector

    def emit(self, data: object, lines: Iterable[str]) -> None:
        """Print the answer: data as JSON with --json, else the lines for a person."""
        if self.json:
            self.out.write(to_json(data))
        else:
            for line in lines:
                self.out.write(line)


Run = Callable[[Session, dict[str, Any]], None]


@dataclass(frozen=True)
class Subcommand:
    """One subcommand: its name, help, arguments, and the function that runs it."""

    name: str
    help: str
    arguments: tuple[Argument, ...]
    run: Run
    #: Whether it asks before acting (and takes --yes to skip the question).
    destructive: bool = False

    def add_to(self, parser: CommandParser) -> None:
        """Declare the subcommand's arguments and the common flags on its parser."""
        for argument in self.arguments:
            parser.add_argument(*argument.flags, **argument.options)
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
        if self.destructive:
            parser.add_argument("--yes", action="store_true", help="do it without asking")


def subcommand(
    help: str, *arguments: Argument, destructive: bool = False
) -> Callable[[Run], Subcommand]:
    """Make a function a subcommand named after it (a trailing underscore dropped)."""

    def make(run: Run) -> Subcommand:
        name = run.__name__.rstrip("_").replace("_", "-")
        return Subcommand(name, help, arguments, run, destructive)

    return make
