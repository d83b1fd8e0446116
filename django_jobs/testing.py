"""Helpers for tests of projects that use django-jobs."""

from __future__ import annotations

from collections.abc import Sequence

from django_jobs.client import get_broker
from django_jobs.worker.processor import Outcome, Processor


def run_burst(queues: Sequence[str] | None = None, max_tasks: int | None = None) -> list[Outcome]:
    """Run every task that is due, in this process, until none is left; return the outcomes.

    Due scheduled and retry tasks are forwarded first, as the worker's forwarder would; tasks
    that are not due yet (a delay, a retry's backoff) are left alone.
    """
    broker = get_broker()
    # No connection hygiene: the test's own transaction must survive the jobs it runs.
    processor = Processor(broker, queues, hygiene=False)
    outcomes: list[Outcome] = []
    while max_tasks is None or len(outcomes) < max_tasks:
        outcome = processor.process_one()
        if outcome is not None:
            outcomes.append(outcome)
            continue
        if not sum(broker.forward(queue) for queue in processor.queues):
            break
    return outcomes
