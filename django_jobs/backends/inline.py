"""Run now, in this process, as Django's immediate task backend does (Redis disabled)."""

from __future__ import annotations

from collections.abc import Sequence

from django_jobs.backends.base import Submission
from django_jobs.broker.protocol import Accepted
from django_jobs.execution import run_inline


class InlineBackend:
    """Each submission runs at once, once, with no retry: its state is completed or dead.

    Idempotency keys are not checked (there is no Redis to hold them).
    """

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        return [Accepted(run_inline(s.job, s.message)) for s in submissions]
