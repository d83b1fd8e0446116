"""Helpers for the test suites of projects that use django-jobs.

Without Redis, like Django's ``mail.outbox``::

    from django_jobs.testing import assert_enqueued, capture_jobs

    def test_signup_sends_welcome(client):
        with capture_jobs() as jobs:
            client.post("/signup/", {...})
        assert_enqueued(SendWelcome, payload=WelcomePayload(user_id=1), queue="critical")
        jobs.run_all()  # run them here, now, as the worker would

With pytest, the ``jobs_captured`` fixture (``django_jobs.pytest_plugin``) does the same for
the whole test. With Redis, `run_burst()` runs what is due through the real broker.

Capturing swaps the backend only (`client.override_backend`): every enqueue runs the real client
code (payload checks, defaults, PayloadTooLarge, idempotency keys and DuplicateJob, on_commit
and ENQUEUE_ON_COMMIT), and the tasks are kept here instead of being written to Redis. An
on-commit enqueue is captured when its transaction commits, as it would be sent then (in a test
that runs inside a transaction, use Django's captureOnCommitCallbacks(execute=True)).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django_jobs.backends.base import Submission
from django_jobs.broker.factory import get_broker
from django_jobs.broker.protocol import Accepted
from django_jobs.client import override_backend
from django_jobs.execution import run_job
from django_jobs.jobs import Job
from django_jobs.keys import State
from django_jobs.message import JobContext, Message, decode, payload_from_json
from django_jobs.worker.processor import Outcome, Processor


@dataclass(frozen=True)
class EnqueuedJob:
    """One captured enqueue: the job class, its payload as the worker would see it, and the
    task's options."""

    job: type[Job[Any]]
    payload: Any
    message: Message
    #: Seconds from the enqueue until due (0: at once), or the eta as epoch seconds.
    delay: float
    eta: float | None

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def queue(self) -> str:
        return self.message.queue

    @property
    def idempotency_key(self) -> str | None:
        return self.message.idempotency_key

    def run(self) -> None:
        """Run the job now, in this process, as its first attempt; exceptions propagate."""
        context = JobContext(
            job_id=self.id,
            attempt=1,
            crashes=0,
            queue=self.queue,
            deadline=time.time() + self.message.timeout,
            idempotency_key=self.idempotency_key,
        )
        run_job(self.job, self.payload, context, hygiene=False)

    def __str__(self) -> str:
        return f"{self.job.__name__}({self.payload!r}) on {self.queue!r}"


class CapturedJobs:
    """The jobs enqueued while a capture is active, in order."""

    def __init__(self) -> None:
        self.jobs: list[EnqueuedJob] = []
        #: Idempotency keys taken, as the broker's SET NX would hold them (per queue and job):
        #: (queue, job name, key) -> task id.
        self.idempotency: dict[tuple[str, str, str], str] = {}

    def __iter__(self) -> Iterator[EnqueuedJob]:
        return iter(list(self.jobs))

    def __len__(self) -> int:
        return len(self.jobs)

    def clear(self) -> None:
        """Forget the jobs captured so far (idempotency keys are kept, as in Redis)."""
        self.jobs.clear()

    def run_all(self) -> list[EnqueuedJob]:
        """Run every captured job inline, oldest first, including jobs they enqueue; return
        what ran. Each is removed before it runs; an exception stops the run and propagates."""
        ran = []
        while self.jobs:
            job = self.jobs.pop(0)
            job.run()
            ran.append(job)
        return ran


class CaptureBackend:
    """A backend that keeps enqueued tasks in a CapturedJobs instead of sending them anywhere."""

    def __init__(self, captured: CapturedJobs) -> None:
        self.captured = captured

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        accepted = []
        for s in submissions:
            key = s.message.idempotency_key
            scoped = None if key is None else (s.message.queue, s.job.name, key)
            if scoped is not None and scoped in self.captured.idempotency:
                accepted.append(Accepted(State.PENDING, self.captured.idempotency[scoped]))
                continue
            if scoped is not None:
                self.captured.idempotency[scoped] = s.message.id
            # As a worker would read it: the round trip is real.
            message = decode(s.encoded, s.message.id, s.message.queue)
            payload = payload_from_json(message.payload, s.job.payload_type)
            self.captured.jobs.append(EnqueuedJob(s.job, payload, message, s.delay, s.eta))
            due_later = s.delay > 0 or (s.eta is not None and s.eta > time.time())
            accepted.append(Accepted(State.SCHEDULED if due_later else State.PENDING))
        return accepted


_active: list[CapturedJobs] = []


@contextmanager
def capture_jobs() -> Iterator[CapturedJobs]:
    """Capture every enqueue inside the block instead of sending it to Redis (none needed).

    The client's backend is replaced by a CaptureBackend, so that an enqueue takes the same path
    as in production, whatever REDIS_URL and WHEN_DISABLED say (even when the test changes JOBS
    inside the block).
    """
    captured = CapturedJobs()
    with override_backend(CaptureBackend(captured)):
        _active.append(captured)
        try:
            yield captured
        finally:
            _active.remove(captured)


def _current() -> CapturedJobs:
    if not _active:
        raise RuntimeError(
            "No jobs are being captured: wrap the code in `with capture_jobs():` or use the "
            "pytest fixture `jobs_captured` (django_jobs.pytest_plugin)."
        )
    return _active[-1]


def _matches(entry: EnqueuedJob, payload: Any, queue: str | None) -> bool:
    if queue is not None and entry.queue != queue:
        return False
    if payload is None:
        return True
    if isinstance(payload, dict):  # a subset of the payload's fields
        fields = dataclasses.asdict(entry.payload)
        return all(name in fields and fields[name] == value for name, value in payload.items())
    return bool(entry.payload == payload)


def enqueued_jobs(job: type[Job[Any]] | None = None) -> list[EnqueuedJob]:
    """The jobs captured so far (of one job class, if given), oldest first."""
    return [e for e in _current() if job is None or e.job is job]


def assert_enqueued(
    job: type[Job[Any]],
    *,
    payload: Any = None,
    queue: str | None = None,
    count: int | None = None,
) -> list[EnqueuedJob]:
    """Assert that `job` was enqueued (with this payload, or these payload fields as a dict,
    on this queue; exactly `count` times if given); return the matching captured jobs."""
    matching = [e for e in enqueued_jobs(job) if _matches(e, payload, queue)]
    if (count is None and not matching) or (count is not None and len(matching) != count):
        wanted = _describe(job, payload, queue)
        times = "at least once" if count is None else f"{count} time(s)"
        raise AssertionError(
            f"expected {wanted} enqueued {times}, found {len(matching)}; enqueued: {_listing()}"
        )
    return matching


def assert_not_enqueued(
    job: type[Job[Any]], *, payload: Any = None, queue: str | None = None
) -> None:
    """Assert that no matching `job` was enqueued."""
    matching = [e for e in enqueued_jobs(job) if _matches(e, payload, queue)]
    if matching:
        raise AssertionError(
            f"expected no {_describe(job, payload, queue)} enqueued, found "
            f"{', '.join(str(e) for e in matching)}"
        )


def _describe(job: type[Job[Any]], payload: Any, queue: str | None) -> str:
    text = job.__name__ if payload is None else f"{job.__name__}({payload!r})"
    return text if queue is None else f"{text} on {queue!r}"


def _listing() -> str:
    jobs = [str(e) for e in _current()]
    return ", ".join(jobs) if jobs else "nothing"


def run_burst(queues: Sequence[str] | None = None, max_tasks: int | None = None) -> list[Outcome]:
    """Run every task that is due, in this process, until none is left; return the outcomes.

    The Redis-backed way: the tasks go through the real broker. Due scheduled and retry tasks
    are forwarded first, as the worker's forwarder would; tasks that are not due yet (a delay,
    a retry's backoff) are left alone.
    """
    broker = get_broker()
    # No connection hygiene: the test's own transaction must survive the jobs it runs.
    # By default every queue a worker serves: the flows' pair too, so flows run to their end.
    processor = Processor(broker, queues or broker.settings.served_queues, hygiene=False)
    outcomes: list[Outcome] = []
    while max_tasks is None or len(outcomes) < max_tasks:
        outcome = processor.process_one()
        if outcome is not None:
            outcomes.append(outcome)
            continue
        if not sum(broker.forward(queue) for queue in processor.queues):
            break
    return outcomes
