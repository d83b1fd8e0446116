"""Cancel a task by its id: `django_jobs.cancel(job_id)` and `JobHandle.cancel()`.

A task waiting to run (pending, scheduled, retry) is canceled at once: it never runs, and its
record is kept as `canceled` for the job's retention (then the janitor deletes it, as it does
completed tasks). A running task is asked to stop: within a heartbeat of its worker
(JOBS["HEARTBEAT_INTERVAL"]) the handler sees `JobCanceled` raised inside it, and the task ends
canceled, neither retried nor dead, whatever the handler does with it; one that does not stop
within JOBS["CANCEL_GRACE"] has its child killed and ends canceled all the same. Either way the
idempotency key stays taken until its window ends, as after any other end of a task: delete the
canceled task (the admin, the API, `manage.py jobs delete`) to release it sooner.

The answer is a `CancelOutcome`, never an exception for a task that had already ended
(FINISHED) or that cannot be found (NOT_FOUND: no such id, or its record is gone after its
retention). `TaskCalls` is JobHandle's base: what a handle asks of Redis once its task is
enqueued (its state now, its cancel), kept here so that client.py stays the enqueue.
"""

from __future__ import annotations

from django_jobs.broker.factory import get_broker
from django_jobs.broker.protocol import Broker, Cancellation, CancelOutcome
from django_jobs.broker.shards import shards_for
from django_jobs.keys import State

__all__ = ["TOOK", "CancelOutcome", "TaskCalls", "cancel", "cancel_task", "said"]

#: The outcomes of a cancel that did something: the task was canceled, or asked to stop.
TOOK = frozenset({CancelOutcome.CANCELED, CancelOutcome.REQUESTED})


def cancel_task(broker: Broker, task_id: str, queue: str | None = None) -> Cancellation:
    """Cancel the task of this id in `queue`, or in whichever queue of ours holds it (one round
    trip per queue looked in); say what became of it and the state it was found in."""
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(f"a task id is a non-empty str, got {task_id!r}")
    queues = (queue,) if queue else broker.settings.known_queues
    for name in shards_for(broker.settings).expand(queues):  # each shard of a sharded one
        answer = broker.cancel(name, task_id)
        if answer.outcome is not CancelOutcome.NOT_FOUND:
            return answer
    return Cancellation(CancelOutcome.NOT_FOUND, "")


def cancel(job_id: str, *, queue: str | None = None) -> CancelOutcome:
    """Cancel the job `job_id` (a handle's `id`): a waiting one now, a running one is asked to
    stop (see the module's docstring). Raises JobsDisabled without JOBS["REDIS_URL"]."""
    return cancel_task(get_broker(), job_id, queue).outcome


class TaskCalls:
    """What a JobHandle asks of Redis about its task (its base class)."""

    id: str
    queue: str
    state: str

    def refresh(self) -> str | None:
        """Read the task's current state from Redis (None once it is gone)."""
        broker = get_broker()
        for name in shards_for(broker.settings).of(self.queue):  # each shard of a sharded one
            state = broker.task_state(name, self.id)
            if state is not None:
                self.state = state
                return state
        return None

    def cancel(self) -> CancelOutcome:
        """Cancel the task (see `django_jobs.cancel`); `state` becomes "canceled" when it was
        canceled at once, and stays "active" for a running one asked to stop."""
        answer = cancel_task(get_broker(), self.id, self.queue)
        if answer.outcome is CancelOutcome.CANCELED:
            self.state = State.CANCELED
        elif answer.state:
            self.state = answer.state
        return answer.outcome


def said(task_id: str, answer: Cancellation) -> str:
    """What became of a cancel, in words (the admin's message, the API's detail, the CLI)."""
    if answer.outcome is CancelOutcome.CANCELED:
        return f"Task {task_id} is canceled (it was {answer.state}): it will not run."
    if answer.outcome is CancelOutcome.REQUESTED:
        return (
            f"Task {task_id} is running: it is asked to stop (JobCanceled is raised in it within "
            f"a heartbeat of its worker), and ends canceled."
        )
    if answer.outcome is CancelOutcome.FINISHED:
        return f"Task {task_id} had already ended ({answer.state}): nothing to cancel."
    return f"No task {task_id} in any queue: it finished and expired, or was deleted."
