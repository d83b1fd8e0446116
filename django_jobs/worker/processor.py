"""Run one task: decode it, find its job, run it, and write the outcome.

This is the part of a worker child that touches a task. It decides retry or dead from the
attempts the dequeue reported, and writes the outcome only under the epoch it was handed: if the
task was recovered and given to someone else meanwhile, the write changes nothing.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from django_jobs.broker.protocol import Action, Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import LeaseLost, UnknownJob
from django_jobs.execution import run_inline as run_inline  # client.py's import, until it moves
from django_jobs.execution import run_job
from django_jobs.jobs import JobContext, registry
from django_jobs.keys import State
from django_jobs.message import DecodeError, Message, decode, payload_from_json

logger = logging.getLogger("django_jobs.worker.processor")

#: The longest error line kept with a task, in characters: an exception's message can be huge.
MAX_ERROR = 1_000
#: The longest traceback kept with a task, in characters. Its start (the stack) and its end (the
#: exception raised last) are kept and the middle is cut, so that a huge message cannot push the
#: stack out.
MAX_TRACEBACK = 32_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one run: the task's new state ("stale": the outcome was not ours)."""

    task_id: str
    job: str
    queue: str
    state: str
    error: str = ""


def _text(exc: BaseException) -> str:
    """str(exc), or what went wrong trying: an exception's __str__ may itself raise."""
    try:
        return str(exc)
    except Exception as failure:
        try:
            why = f"{type(failure).__name__}: {failure}"
        except Exception:
            why = type(failure).__name__
        return f"<str() failed: {why}>"


def _error_line(exc: BaseException) -> str:
    """The first line of an exception's message after its type, bounded; never raises."""
    text = _text(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= MAX_ERROR else line[: MAX_ERROR - 3] + "..."


def _traceback() -> str:
    text = traceback.format_exc()
    if len(text) <= MAX_TRACEBACK:
        return text
    half = MAX_TRACEBACK // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n... ({cut} characters cut) ...\n{text[-half:]}"


class Processor:
    """Run tasks: `decide` runs one and says what to write; `process` also writes it.

    A worker child only decides (the supervisor writes outcomes in batches); `run_burst` and
    other in-process consumers use `process_one`.
    """

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str] | None = None,
        *,
        hygiene: bool = True,
        guard: Callable[[float], AbstractContextManager[None]] = lambda timeout: nullcontext(),
    ) -> None:
        self.broker = broker
        self.hygiene = hygiene
        #: Wraps each run given the task's timeout in seconds (the worker child's alarm).
        self.guard = guard
        self.settings = broker.settings
        self.queues = tuple(queues or self.settings.queues)

    def process_one(self) -> Outcome | None:
        """Run the next task, if there is one, and write its outcome."""
        delivery = self.broker.dequeue(self.queues)
        return None if delivery is None else self.process(delivery)

    def process(self, delivery: Delivery) -> Outcome:
        """Run a task handed out by dequeue and write its outcome."""
        verdict = self.decide(delivery)
        return outcome(verdict, self.broker.write(verdict))

    def decide(self, delivery: Delivery) -> Verdict:
        """Run a task handed out by dequeue; return what to write (nothing is written).

        LeaseLost raised inside the run (by the worker child's guard) propagates: nothing is to
        be written for that run.
        """
        try:
            message = decode(delivery.raw)
        except DecodeError as exc:
            return _kill(delivery, "?", f"could not decode the task record: {exc}")
        if delivery.problem:  # garbage in the record (a time field): it can never run as it is
            return _kill(delivery, message.job, delivery.problem)
        try:
            job = registry.get(message.job)
        except UnknownJob as exc:
            return self._unknown(delivery, message, exc)
        try:
            payload = payload_from_json(message.payload, job.payload_type)
        except DecodeError as exc:
            return _kill(delivery, message.job, str(exc))
        attempt = delivery.attempts + 1
        context = JobContext(
            job_id=delivery.id,
            attempt=attempt,
            crashes=delivery.crashes,
            queue=delivery.queue,
            deadline=time.time() + message.timeout,
            idempotency_key=message.idempotency_key,
        )
        started = time.monotonic()
        try:
            with self.guard(message.timeout):
                run_job(job, payload, context, hygiene=self.hygiene)
        except LeaseLost:
            raise  # the task is another worker's now: no outcome of this run may be written
        except Exception as exc:
            fields: dict[str, Any] = {
                "error": _error_line(exc),
                "traceback": _traceback(),
                "attempt": attempt,
                "max_attempts": message.max_attempts,
                "duration": time.monotonic() - started,
            }
            if attempt >= message.max_attempts:
                return _verdict(delivery, message.job, "kill", **fields)
            return _verdict(delivery, message.job, "retry", delay=job.backoff(attempt), **fields)
        return _verdict(
            delivery,
            message.job,
            "ack",
            retention=message.retention,
            attempt=attempt,
            max_attempts=message.max_attempts,
            duration=time.monotonic() - started,
        )

    def _unknown(self, delivery: Delivery, message: Message, exc: UnknownJob) -> Verdict:
        """Bounce a task of a job type this process does not know, until the grace runs out."""
        first = delivery.first_unknown_at
        # Both times are Redis TIME: the lease deadline was set at dequeue to now + LEASE.
        now = delivery.lease_deadline - self.settings.lease
        if first is not None and now - first >= self.settings.unknown_job_grace:
            error = f"{exc} (bounced for {self.settings.unknown_job_grace:g}s)"
            return _kill(delivery, message.job, error)
        delay = self.settings.unknown_job_delay
        return _verdict(delivery, message.job, "retry", delay=delay, error=str(exc), spend=False,
                        unknown=True)  # fmt: skip


def write_timed_out(broker: RedisBroker, delivery: Delivery, timeout: float) -> None:
    """Retry (or kill, past max_attempts) a task whose child was killed for its timeout: the
    supervisor's counterpart of `decide`, from the task's record (the child is gone)."""
    error = f"JobTimeout: timed out after {timeout:g} s (killed after the grace period)"
    k = broker.keys(delivery.queue)
    with broker.unavailable():
        raw = broker.client.hmget(k.task(delivery.id), ["attempts", "msg"])
    try:
        message = decode(str(raw[1] or ""))
        job = registry.get(message.job)
    except (DecodeError, UnknownJob):
        broker.kill(delivery, error, "")
        return
    attempts = str(raw[0] or "0")
    attempt = (int(attempts) if attempts.isdigit() else 0) + 1  # garbage counts as 0
    if attempt >= message.max_attempts:
        broker.kill(delivery, error, "")
    else:
        broker.retry(delivery, job.backoff(attempt), error, "")


def _verdict(delivery: Delivery, job: str, action: str, **fields: Any) -> Verdict:
    return Verdict(delivery.id, delivery.queue, delivery.epoch, job, Action(action), **fields)


def _kill(delivery: Delivery, job: str, error: str) -> Verdict:
    """A task that can never run: dead, without spending an attempt."""
    return _verdict(delivery, job, "kill", error=error, spend=False)


STATES = {"ack": State.COMPLETED, "retry": State.RETRY, "kill": State.DEAD}


def outcome(verdict: Verdict, written: bool) -> Outcome:
    """Log one line for a run's outcome and return it ("stale" if it was not written)."""
    v = verdict
    if not written:
        logger.warning(
            "%s %s: outcome not written, the task was handed to another worker (lease lost)",
            v.job, v.task_id,
        )  # fmt: skip
        return Outcome(v.task_id, v.job, v.queue, "stale")
    if v.action == "ack":
        logger.info("%s %s completed (attempt %d, %.3fs)", v.job, v.task_id, v.attempt, v.duration)
    elif v.action == "retry" and v.unknown:
        logger.warning("%s %s put back: %s", v.job, v.task_id, v.error)
    elif v.action == "retry":
        logger.warning(
            "%s %s failed (attempt %d of %d), retry in %.1fs: %s",
            v.job, v.task_id, v.attempt, v.max_attempts, v.delay, v.error,
        )  # fmt: skip
    elif v.spend:
        attempts = "attempt" if v.attempt == 1 else "attempts"
        logger.error("%s %s dead after %d %s: %s", v.job, v.task_id, v.attempt, attempts, v.error)
    else:
        logger.error("task %s (%s) dead: %s", v.task_id, v.job, v.error)
    return Outcome(
        v.task_id, v.job, v.queue, STATES[v.action], "" if v.action == "ack" else v.error
    )
