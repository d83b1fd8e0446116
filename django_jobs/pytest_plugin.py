"""pytest fixtures for projects that use django-jobs.

Enable with ``pytest_plugins = ["django_jobs.pytest_plugin"]`` in your top-level conftest.py
(or import the fixture: ``from django_jobs.pytest_plugin import jobs_captured``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_jobs.testing import CapturedJobs, capture_jobs


@pytest.fixture
def jobs_captured() -> Iterator[CapturedJobs]:
    """Capture every enqueue of the test instead of sending it to Redis (see capture_jobs)."""
    with capture_jobs() as captured:
        yield captured
