"""pytest fixtures for projects that use django-jobs.

Installed as a pytest plugin (the ``pytest11`` entry point of django-redis-jobs), so its
fixtures are there in every suite without a conftest line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_jobs.testing import CapturedJobs


@pytest.fixture
def jobs_captured() -> Iterator[CapturedJobs]:
    """Capture every enqueue of the test instead of sending it to Redis (see capture_jobs)."""
    # Imported here, not at the top: pytest loads this plugin before Django is set up, and the
    # test helpers import the models (through the code that runs jobs).
    from django_jobs.testing import capture_jobs

    with capture_jobs() as captured:
        yield captured
