"""Log and drop (Redis disabled, WHEN_DISABLED "skip")."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_jobs.backends.base import Submission
from django_jobs.broker.protocol import Accepted

logger = logging.getLogger("django_jobs.client")

#: The state of a skipped job's handle.
SKIPPED = "skipped"


class SkipBackend:
    """Nothing runs; each submission is logged as a warning and its handle says "skipped"."""

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        for s in submissions:
            logger.warning(
                "jobs are disabled (REDIS_URL is not set): skipped %s %s, which will not run "
                "(JOBS['WHEN_DISABLED'] is 'skip'; set REDIS_URL to run jobs)",
                s.job.name,
                s.message.id,
            )
        return [Accepted(SKIPPED) for _ in submissions]
