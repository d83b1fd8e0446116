"""Progress of a bulk operation (retry --all-dead, purge, many ids), on stderr.

With `rich` installed (the `cli` extra: `pip install django-redis-jobs[cli]`) and stderr a
terminal, a live bar; otherwise plain lines, one each tenth of the way and one at the end, which
read well in a log. stdout is left to the answer, so `--json` output stays one document.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

from django.core.management.base import OutputWrapper

#: Whether the `rich` library is installed (the `cli` extra).
RICH = importlib.util.find_spec("rich") is not None

Advance = Callable[[int], None]


class _Raw:
    """A stream writing through an OutputWrapper without the line ending it adds, for rich."""

    def __init__(self, wrapper: OutputWrapper) -> None:
        self.wrapper = wrapper

    def write(self, text: str) -> int:
        self.wrapper.write(text, ending="")
        return len(text)

    def flush(self) -> None:
        self.wrapper.flush()

    def isatty(self) -> bool:
        return self.wrapper.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapper, name)


@contextmanager
def progress(err: OutputWrapper, label: str, total: int) -> Iterator[Advance]:
    """A progress display of total steps; the function it yields advances it by n."""
    if RICH and err.isatty():
        with _rich_bar(err, label, total) as step:
            yield step
        return
    done = shown = 0

    def advance(n: int) -> None:
        nonlocal done, shown
        done += n
        tenth = done * 10 // total if total else 10
        if tenth > shown or done >= total:
            shown = tenth
            err.write(f"{label}: {done:,}/{total:,}")

    yield advance


@contextmanager
def _rich_bar(err: OutputWrapper, label: str, total: int) -> Iterator[Advance]:
    # Imported here: rich is an optional extra, and only a terminal's run needs it.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    console = Console(file=cast("IO[str]", _Raw(err)))
    columns = (*Progress.get_default_columns()[:1], BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
