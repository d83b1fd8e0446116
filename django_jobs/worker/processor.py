"""Run one task: decode it, find its job, run it, and turn the policy's decision into a verdict.

The outcome policy (policy.py) says what becomes of the run; this module runs it and builds
what to write, under the epoch the run was handed: if the task was recovered and given to
someone else meanwhile, the write changes nothing. A worker child writes its verdict itself,
with its next fetch (`RedisBroker.settle`); `run_burst` and other in-process consumers use
`process_one`, which writes each verdict on its own. The supervisor writes what it decides for
a reaped child with `write_decision`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple

from django_jobs import tracing
from django_jobs.broker.limits import dequeue_args
from django_jobs.broker.protocol import Action, Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.broker.shards import shards_for
from django_jobs.exceptions import UnknownJob
from django_jobs.execution import run_job
from django_jobs.jobs import Job, JobContext, registry
from django_jobs.keys import State, logical_queue
from django_jobs.message import RECORD_EVICTED, DecodeError, Message, decode, payload_from_json
from django_jobs.metrics import hook
from django_jobs.worker import policy
from django_jobs.worker.policy import Attempt, Decision, Fate

logger = logging.getLogger("django_jobs.worker.processor")

#: Wraps each run, given the task's timeout in seconds and the attempt (the child's alarm and
#: its slot in the table).
Guard = Callable[[float, Attempt], AbstractContextManager[None]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one run: the task's new state ("stale": the outcome was not ours)."""

    task_id: str
    job: str
    queue: str
    state: str
    error: str = ""


class Run(NamedTuple):
    """One run of a task, ready to start (a tuple: built once per task, cheaply)."""

    delivery: Delivery
    message: Message
    job: type[Job[Any]]
    payload: Any
    attempt: Attempt
    context: JobContext


#: The queue in Redis of the task `Processor.execute` runs in this context, while it runs: a
#: shard of a sharded queue (broker/shards.py), where JobContext.queue names the queue of ours.
#: What a job writes beside its task's record goes there, in its slot (the Django tasks
#: backend's run record: tasks/run.py); "" outside a worker's run.
running_queue: ContextVar[str] = ContextVar("running_queue", default="")


def _no_guard(timeout: float, attempt: Attempt) -> AbstractContextManager[None]:
    return nullcontext()


class Processor:
    """Run tasks: `decide` runs one and says what to write; `process` also writes it."""

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str] | None = None,
        *,
        hygiene: bool = True,
        guard: Guard = _no_guard,
    ) -> None:
        self.broker = broker
        self.hygiene = hygiene
        self.guard = guard
        self.settings = broker.settings
        #: As the broker has them: a sharded queue's shards (broker/shards.py).
        self.queues = shards_for(self.settings).expand(queues or self.settings.queues)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        # Every fetch of this process holds the limits of the job types it knows.
        broker.limit_args = dequeue_args(registry.limits())

    def process_one(self) -> Outcome | None:
        """Run the next task, if there is one, and write its outcome."""
        delivery = self.broker.dequeue(self.queues)
        return None if delivery is None else self.process(delivery)

    def process(self, delivery: Delivery) -> Outcome:
        """Run a task handed out by dequeue and write its outcome."""
        verdict = self.decide(delivery)
        if verdict is None:
            return Outcome(delivery.id, "", logical_queue(delivery.queue), "stale")
        return outcome(verdict, self.broker.write(verdict))

    def decide(self, delivery: Delivery) -> Verdict | None:
        """Run a task handed out by dequeue; return what to write (nothing is written), or
        None when nothing may be written (the run lost its lease: the task is another's)."""
        run = self.prepare(delivery)
        return run if isinstance(run, Verdict) else self.execute(run)

    def execute(self, run: Run) -> Verdict | None:
        """Run a prepared run here, under the guard; return what to write, as `decide`."""
        started = self.start(run)
        delivery, job, message, number = run.delivery, run.job, run.message, run.attempt.number
        shard = running_queue.set(delivery.queue)
        try:
            with self.guard(message.timeout, run.attempt):
                if tracing.tracer is None:  # a branch, not a nullcontext: free when off
                    ran = run_job(job, run.payload, run.context, hygiene=self.hygiene)
                else:
                    with tracing.running(
                        job.name, delivery.id, logical_queue(delivery.queue), number, message.trace
                    ):
                        ran = run_job(job, run.payload, run.context, hygiene=self.hygiene)
        except Exception as exc:
            decision = policy.failed(exc, run.attempt)
        else:
            decision = policy.COMPLETED
            if not ran:
                logger.info(
                    "%s %s: an earlier run of this atomic task committed; acknowledged without "
                    "running it again", job.name, delivery.id,
                )  # fmt: skip
        finally:
            running_queue.reset(shard)
        return self.conclude(run, decision, started)

    def prepare(self, delivery: Delivery) -> Run | Verdict:
        """What a run of the task needs; or, if it cannot run (a corrupt record, an unknown job
        type), what to write for it instead."""
        if not delivery.raw and delivery.enqueued_at is None:  # nothing is left of its record
            return verdict(delivery, "?", policy.corrupt(RECORD_EVICTED))
        try:
            message = decode(delivery.raw, delivery.id, logical_queue(delivery.queue))
        except DecodeError as exc:
            return verdict(
                delivery, "?", policy.corrupt(f"could not decode the task record: {exc}")
            )
        if delivery.problem:  # garbage in the record (a time field): it can never run as it is
            return verdict(delivery, message.job, policy.corrupt(delivery.problem))
        try:
            job = registry.get(message.job)
        except UnknownJob as exc:
            # Both times are Redis TIME: the lease deadline was set at dequeue to now + LEASE.
            now = delivery.lease_deadline - self.settings.lease
            decision = policy.unknown(
                exc, delivery.first_unknown_at, now,
                self.settings.unknown_job_grace, self.settings.unknown_job_delay,
            )  # fmt: skip
            return verdict(delivery, message.job, decision)
        try:
            payload = payload_from_json(message.payload, job.payload_type, message.sensitive)
        except DecodeError as exc:
            return verdict(delivery, message.job, policy.corrupt(str(exc)))
        number = delivery.attempts + 1
        # The task's deliveries so far, this one included: its epoch (1 if not a number).
        deliveries = int(delivery.epoch) if delivery.epoch.isdigit() else 1
        attempt = Attempt(number, message.max_attempts, deliveries, job.backoff(number))
        context = JobContext(
            job_id=delivery.id,
            attempt=number,
            crashes=delivery.crashes,
            queue=logical_queue(delivery.queue),  # the queue of ours, not its shard
            deadline=time.time() + message.timeout,
            idempotency_key=message.idempotency_key,
            worker_id=self.worker_id,
        )
        return Run(delivery, message, job, payload, attempt, context)

    def start(self, run: Run) -> float:
        """Count the run's start (metrics); return its start time (monotonic)."""
        if hook.recorder is not None:
            queue = logical_queue(run.delivery.queue)
            hook.recorder.started(run.message.job, queue, run.delivery.enqueued_at)
        return time.monotonic()

    def conclude(self, run: Run, decision: Decision, started: float) -> Verdict | None:
        """What to write for a run that ended with the policy's decision; None for nothing."""
        delivery, message = run.delivery, run.message
        if decision.fate is Fate.NOTHING:
            logger.warning(
                "task %s: run interrupted (lease lost); nothing written for it", delivery.id
            )
            return None
        return verdict(
            delivery, message.job, decision,
            retention=message.retention, attempt=run.attempt.number,
            max_attempts=message.max_attempts, duration=time.monotonic() - started,
        )  # fmt: skip


def verdict(delivery: Delivery, job: str, decision: Decision, **fields: Any) -> Verdict:
    """What to write for a run the policy decided to ack, retry or kill."""
    d = decision
    # `is` tests, not a dict keyed by Fate: an enum's hash is a Python call (the hot path).
    if d.fate is Fate.ACK:
        return Verdict(delivery.id, delivery.queue, delivery.epoch, job, Action.ACK, **fields)
    if d.fate is Fate.RETRY:
        action = Action.RETRY
    elif d.fate is Fate.KILL:
        action = Action.KILL
    elif d.fate is Fate.CANCEL:
        action = Action.CANCEL
    else:
        raise ValueError(f"a verdict is an ack, a retry, a kill or a cancel, not {d.fate}")
    fields.pop("retention", None)
    fields.update(delay=d.delay, error=d.error, traceback=d.traceback, spend=d.spend,
                  unknown=d.unknown)  # fmt: skip
    return Verdict(delivery.id, delivery.queue, delivery.epoch, job, action, **fields)


def write_decision(broker: RedisBroker, delivery: Delivery, decision: Decision) -> str | None:
    """Write what the policy decided for a run whose child is gone (the supervisor's side);
    return the task's new state, or None if the delivery was stale or nothing was written.

    Raises BrokerUnavailable: then nothing may have been written, and the task's lease
    expires and the recoverer puts it back.
    """
    d = decision
    if d.fate is Fate.REQUEUE:
        state = broker.requeue(delivery, crash=d.crash, reason=d.error)
        if d.crash and state is not None and hook.recorder is not None:
            hook.recorder.crashed(hook.job_of(broker, delivery), logical_queue(delivery.queue))
        return state
    if d.fate is Fate.RETRY:
        written = broker.retry(delivery, d.delay, d.error, d.traceback, spend=d.spend)
    elif d.fate is Fate.KILL:
        written = broker.kill(delivery, d.error, d.traceback, spend=d.spend)
    elif d.fate is Fate.CANCEL:
        written = broker.end_canceled(delivery, d.error, d.traceback)
    else:
        return None  # NOTHING (and ACK, which only a finished run decides: its child writes it)
    if not written:
        return None
    if hook.recorder is not None:  # a run killed after its timeout's grace: counted here
        hook.recorder.finished(verdict(delivery, hook.job_of(broker, delivery), d), True)
    if d.fate is Fate.CANCEL:
        return State.CANCELED
    return State.RETRY if d.fate is Fate.RETRY else State.DEAD


STATES = {Action.ACK: State.COMPLETED, Action.RETRY: State.RETRY, Action.KILL: State.DEAD,
          Action.CANCEL: State.CANCELED}  # fmt: skip


def outcome(verdict: Verdict, written: bool) -> Outcome:
    """Log one line for a run's outcome and return it ("stale" if it was not written)."""
    log_outcome(verdict, written)
    v, queue = verdict, logical_queue(verdict.queue)
    if not written:
        return Outcome(v.task_id, v.job, queue, "stale")
    return Outcome(
        v.task_id, v.job, queue, STATES[v.action], "" if v.action is Action.ACK else v.error
    )


def log_outcome(verdict: Verdict, written: bool) -> None:
    """Log one line for a run's outcome (the worker child's form of `outcome`: it builds
    nothing, once per task)."""
    v = verdict
    if hook.recorder is not None:
        hook.recorder.finished(v, written)
    if not written:
        logger.warning(
            "%s %s: outcome not written, the task was handed to another worker (lease lost)",
            v.job, v.task_id,
        )  # fmt: skip
    elif v.action is Action.ACK:
        logger.info("%s %s completed (attempt %d, %.3fs)", v.job, v.task_id, v.attempt, v.duration)
    elif v.action is Action.CANCEL:
        logger.info("%s %s canceled while it ran: %s", v.job, v.task_id, v.error)
    elif v.action is Action.RETRY and v.unknown:
        logger.warning("%s %s put back: %s", v.job, v.task_id, v.error)
    elif v.action is Action.RETRY and not v.spend:
        logger.info("%s %s: retry in %.1fs, as its handler asked (%s)", v.job, v.task_id,
                    v.delay, v.error)  # fmt: skip
    elif v.action is Action.RETRY:
        logger.warning(
            "%s %s failed (attempt %d of %d), retry in %.1fs: %s",
            v.job, v.task_id, v.attempt, v.max_attempts, v.delay, v.error,
        )  # fmt: skip
    elif v.spend:
        attempts = "attempt" if v.attempt == 1 else "attempts"
        logger.error("%s %s dead after %d %s: %s", v.job, v.task_id, v.attempt, attempts, v.error)
    else:
        logger.error("task %s (%s) dead: %s", v.task_id, v.job, v.error)
