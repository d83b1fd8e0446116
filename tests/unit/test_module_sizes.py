"""One module per concept, each under 400 lines (issue 13; ../shared/STYLE.md): a module past
it is two concepts, or one that wants a helper module beside it."""

from __future__ import annotations

from pathlib import Path

import django_jobs

MOST = 400
PACKAGE = Path(django_jobs.__file__).parent


def test_modules__none_of_django_jobs_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
    }
    assert len(sizes) > 50  # the package itself, not an empty folder
    assert {name: lines for name, lines in sizes.items() if lines > MOST} == {}
