"""The runs this worker was asked to cancel, on the supervisor's side.

How a cancel reaches a running handler:

1. an operator's cancel marks the running task's record (broker/cancel.py);
2. the supervisor's heartbeat renews the run's lease, and the renewal answers the mark
   (heartbeat.py `on_cancel`), whichever worker runs the task;
3. `Cancels.request` marks the run in the slot table (`SlotTable.mark_canceled`) and sends its
   child LOST_SIGNAL (SIGUSR1), the signal that carries LeaseLost too;
4. the child's handler (child.py `Child.interruption`) raises JobCanceled in the run if it is
   that very run, once; the run ends canceled however the handler ends;
5. a run still going JOBS["CANCEL_GRACE"] seconds after the signal (it caught JobCanceled and
   carried on, or sits in C code) has its child killed (`enforce`), like a timeout, and the
   supervisor writes it canceled when it reaps the child (`ended`). So does a child that dies
   on its own after the signal, or that is still running when the worker stops.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django_jobs.broker.protocol import Delivery
from django_jobs.worker import child
from django_jobs.worker.children import ChildProcess
from django_jobs.worker.slots import Running, SlotTable

logger = logging.getLogger("django_jobs.worker.supervisor")


@dataclass
class Asked:
    """One run signalled to cancel: its child, the run, when (monotonic), whether killed since."""

    pid: int
    task_id: str
    epoch: str
    at: float
    killed: bool = False

    def runs(self, task: Running | None) -> bool:
        return task is not None and (task.task_id, task.epoch) == (self.task_id, self.epoch)


class Cancels:
    """Signal each run asked to cancel once, and kill the child of one that does not stop."""

    def __init__(self, table: SlotTable, grace: float) -> None:
        self.table = table
        self.grace = grace
        #: The runs signalled, by slot.
        self.asked: dict[int, Asked] = {}

    def request(self, children: Sequence[ChildProcess], delivery: Delivery) -> None:
        """The heartbeat found this run's task asked to cancel: interrupt that run (no other)."""
        for index, c in enumerate(children):
            task = self.table.get(index)
            if c.stopped or task is None or (task.task_id, task.epoch) != (
                delivery.id, delivery.epoch,
            ):  # fmt: skip
                continue
            asked = self.asked.get(index)
            if asked is not None and asked.pid == c.pid and asked.runs(task):
                return  # signalled once already: a second JobCanceled would cut its cleanup
            logger.info(
                "task %s was canceled: interrupting its run (its child %d is killed if it has "
                "not stopped within %gs)", delivery.id, c.pid, self.grace,
            )  # fmt: skip
            self.table.mark_canceled(index, task)
            self.asked[index] = Asked(c.pid, task.task_id, task.epoch, time.monotonic())
            try:
                os.kill(c.pid, child.LOST_SIGNAL)
            except ProcessLookupError:
                pass  # exited already: the supervisor's reap sees it
            return

    def enforce(self, children: Sequence[ChildProcess]) -> None:
        """Kill the child of each run still going past the grace; forget runs that ended."""
        now = time.monotonic()
        for index, asked in list(self.asked.items()):
            c = children[index]
            if c.pid != asked.pid:
                del self.asked[index]  # reaped and replaced: `ended` was asked then
                continue
            if not asked.runs(self.table.get(index)):
                if not asked.killed:
                    del self.asked[index]  # the run ended: its child wrote it canceled
                continue
            if not asked.killed and not c.stopped and now - asked.at > self.grace:
                logger.error(
                    "task %s: its run did not stop within %gs of its cancel: killing child %d",
                    asked.task_id, self.grace, c.pid,
                )  # fmt: skip
                asked.killed = c.killed_for_cancel = True
                os.kill(c.pid, signal.SIGKILL)

    def ended(self, pid: int, task: Running) -> Asked | None:
        """Whether this run of a child that is gone (reaped, or stopped with the worker) was
        asked to cancel: then it ends canceled. Forgets it."""
        for index, asked in self.asked.items():
            if asked.pid == pid and asked.runs(task):
                return self.asked.pop(index)
        return None
