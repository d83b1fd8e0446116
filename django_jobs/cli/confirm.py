"""The question a destructive subcommand asks first, unless `--yes`.

Asked on stderr (stdout stays the answer, JSON with --json) and answered on stdin, only when
stdin is a terminal: a script, a cron job or a pipe has nobody to answer, so there the
subcommand refuses and says to pass --yes.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from django_jobs.cli.registry import Session

YES = frozenset({"y", "yes"})


def confirm(session: Session, question: str) -> None:
    """Return if the operator agrees (or passed --yes); raise CommandError if not."""
    if session.yes:
        return
    if not session.stdin.isatty():
        raise CommandError(
            f"{question} Not asked: stdin is not a terminal. Pass --yes to do it without asking."
        )
    session.err.write(f"{question} [y/N] ", ending="")
    session.err.flush()
    answer = session.stdin.readline().strip().lower()
    if answer not in YES:
        raise CommandError("Not confirmed: nothing was changed.")
