"""A worker child that runs up to N tasks at once on one event loop (`--async-concurrency N`).

For I/O-bound jobs written as ``async def run``: N runs wait on the network side by side in one
process, where one-task children would need N processes. Everything else is the one-task
child's (child.py), per task:

- It owns N consecutive slots of the supervisor's slot table and publishes each run in a slot
  of its own, so the supervisor renews each lease, puts each task back if the child dies (all N
  of them: a crash of the process is a crash of every run in it), and kills the child when one
  run is stuck past its timeout plus the grace (the others go back unspent).
- It fetches as many tasks as it has free slots, in the round trip that writes the outcomes of
  the runs that ended (`RedisBroker.settle`); runs start as they arrive and end in any order.
- An async run is a task on the loop (`coroutines.Interruptible`): its timeout is a timer on the
  loop that throws JobTimeout into it at its await; LeaseLost and JobCanceled, which the
  supervisor's signal asks for, are thrown the same way, into that run only (a canceled run
  ends canceled however its handler ends, as in a one-task child).
- A sync job runs too, on the child's thread with the loop paused (the async runs wait until it
  returns), under the alarm exactly as in a one-task child: keep sync jobs off the queues an
  async worker serves, or accept that they hold up the async ones beside them.

Redis round trips happen between two turns of the loop, on the child's thread: no loop runs
then, so a sync job may use the ORM and the alarm. The wait for work (a wake-up token, then a
fetch: `RedisBroker.wait_and_fetch`) blocks a thread of its own (`Waiter`), with a connection
of its own, so the loop runs on while it waits.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

from django_jobs import coroutines, tracing
from django_jobs.broker.protocol import Delivery, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.exceptions import BrokerUnavailable, JobCanceled, JobTimeout, LeaseLost
from django_jobs.idempotency import current_task
from django_jobs.worker import policy
from django_jobs.worker.child import STALE_POLL, WAIT, Child, die_with_parent
from django_jobs.worker.policy import Fate
from django_jobs.worker.processor import Run, log_outcome
from django_jobs.worker.slots import MAX_ID, Running, SlotTable

logger = logging.getLogger("django_jobs.worker.child")

#: Seconds between two interrupts of the waiter's wait while a stopping child waits for it.
STOP_POLL = 0.1


class Waiter:
    """Block on Redis for work on a thread of its own, on a connection of its own; hand what it
    fetched (or the error) to the loop."""

    def __init__(self, broker: RedisBroker, queues: Sequence[str], loop: asyncio.AbstractEventLoop,
                 done: Callable[[list[Delivery] | BrokerUnavailable], None]) -> None:  # fmt: skip
        self.broker = RedisBroker(broker.client, broker.settings)  # its own connection
        self.queues = tuple(queues)
        self.loop = loop
        self.done = done
        #: A wait asked for and not yet answered on the loop.
        self.busy = False
        self._asked = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="django_jobs-wait", daemon=True)
        self._thread.start()

    def ask(self) -> None:
        """Wait for work (up to WAIT seconds), then fetch: the answer comes to `done`."""
        self.busy = True
        self._asked.set()

    def interrupt(self) -> None:
        """Cut a wait short (safe in a signal handler)."""
        self.broker.interrupt_wait()

    def _serve(self) -> None:  # pragma: no cover - its own thread, tested through the child
        while True:
            self._asked.wait()
            self._asked.clear()
            answer: list[Delivery] | BrokerUnavailable
            try:
                answer = self.broker.wait_and_fetch(self.queues, WAIT)
            except BrokerUnavailable as exc:
                answer = exc
            self.loop.call_soon_threadsafe(self._answer, answer)

    def _answer(self, answer: list[Delivery] | BrokerUnavailable) -> None:
        self.busy = False
        self.done(answer)


class AsyncChild(Child):
    """The loop of one child process that runs a task in each of its slots at once."""

    def __init__(
        self,
        broker: RedisBroker,
        queues: Sequence[str],
        table: SlotTable,
        slots: range,
        parent: int | None = None,
        *,
        watched: bool = False,
    ) -> None:
        super().__init__(broker, queues, table, slots[0], parent, watched=watched)
        self.slots = slots
        self.free = list(reversed(slots))
        self.loop = asyncio.new_event_loop()
        #: Set on the loop when the child has something to do: a run ended, work arrived.
        self.changed = asyncio.Event()
        #: The async runs going on, by slot.
        self.runs: dict[int, tuple[Delivery, coroutines.Interruptible]] = {}
        #: Runs that ended, by slot, and what to write for them (None: nothing).
        self.ended: list[tuple[int, Verdict | None]] = []
        #: Tasks the waiter fetched, not yet started.
        self.arrived: list[Delivery] = []
        #: Whether a fetch may find work (False once one found none, until the waiter says).
        self.maybe_work = True
        #: Runs (id, epoch) going on that LeaseLost, JobCanceled was thrown into (each once).
        self.lost: set[tuple[str, str]] = set()
        self.canceled: set[tuple[str, str]] = set()
        self.waiter = Waiter(broker, queues, self.loop, self._woken)
        #: The `close_old_connections()` under way, that runs starting or ending now share.
        self._closing: asyncio.Future[None] | None = None

    # -- signals (on the child's thread; a sync job may be running) ----------------------------

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self.waiter.interrupt()
        self._on_loop(self.changed.set)

    def _on_lost(self, signum: int, frame: FrameType | None) -> None:
        # For an async run: thrown into it on the loop. For a sync job running now: raised here.
        self._on_loop(self._interrupt_marked)
        super()._on_lost(signum, frame)

    def _on_loop(self, callback: Callable[[], None]) -> None:
        """Have the loop call it at its next turn (from a signal handler: not once it closed)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(callback)

    def _interrupt_marked(self) -> None:
        """Throw into each run the supervisor marked what it was marked for, as a one-task
        child raises it (`Child.interruption`): LeaseLost, else JobCanceled, each once."""
        for slot, (delivery, task) in self.runs.items():
            run = (delivery.id, delivery.epoch)
            if run in self.lost:
                continue
            if self.table.is_lost(slot, *run):
                self.lost.add(run)
                task.interrupt(LeaseLost(f"task {delivery.id} lost its lease: run interrupted"))
            elif run not in self.canceled and self.table.is_canceled(slot, *run):
                self.canceled.add(run)
                task.interrupt(JobCanceled(f"task {delivery.id} was canceled: run interrupted"))

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self._install_signals()
        try:
            self._serve()
        finally:
            coroutines.close(self.loop)

    def _serve(self) -> None:
        while True:
            closing = self.stopping or self._retiring() or (not self.watched and self._orphaned())
            arrived, self.arrived = self.arrived, []
            for delivery in arrived:
                if closing or not self.free:
                    self._hand_back(delivery, "stopping")
                else:
                    self._start(delivery)
            fetch = self.maybe_work and bool(self.free) and not closing and not self.waiter.busy
            if self.ended or fetch:
                self._settle(self._room() if fetch else 0)
                continue
            if closing and not self.runs and not self.waiter.busy:
                self._give_back_unsure(self.broker)
                self._give_back_unsure(self.waiter.broker)
                return
            if not closing and self.free and not self.waiter.busy:
                self.waiter.ask()
            if closing and self.waiter.busy:
                # Again until it answers: a stop that came just before its wait began is missed.
                self.waiter.interrupt()
                self.loop.run_until_complete(self._until_changed(STOP_POLL))
                continue
            self.loop.run_until_complete(self._until_changed(WAIT))

    def _room(self) -> int:
        """How many tasks to fetch: a free slot each, and no more than the child may still take
        before it retires (JOBS["MAX_TASKS_PER_CHILD"])."""
        limit = self.settings.max_tasks_per_child
        return min(len(self.free), limit - self.done) if limit else len(self.free)

    async def _until_changed(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            pass
        self.changed.clear()

    def _settle(self, count: int) -> None:
        """Write the outcomes of the runs that ended and fetch up to count tasks: one round trip."""
        ended = [(slot, verdict) for slot, verdict in self.ended if verdict is not None]
        try:
            written, deliveries = self.broker.settle([v for _, v in ended], self.queues, count)
        except BrokerUnavailable as exc:
            self.outage.failed(exc)
            self.loop.run_until_complete(self._until_changed(self.backoff.next()))
            return
        if self.backoff.failures:
            self._answered()
        for (_, verdict), was_written in zip(ended, written, strict=True):
            log_outcome(verdict, was_written)
        for slot, _ in self.ended:
            self.table.clear(slot)
            self.free.append(slot)
        self.ended = []
        if count and len(deliveries) < count:
            self.maybe_work = False
        for delivery in deliveries:
            self._start(delivery)

    def _woken(self, answer: list[Delivery] | BrokerUnavailable) -> None:
        """The waiter's answer, on the loop."""
        if isinstance(answer, BrokerUnavailable):
            self.outage.failed(answer)
            self.loop.call_later(self.backoff.next(), self._wake)
            return
        self._answered()
        self.arrived += answer
        self._wake()

    def _wake(self) -> None:
        self.maybe_work = True
        self.changed.set()

    # -- runs -------------------------------------------------------------------------------

    def _start(self, delivery: Delivery) -> None:
        """Start a fetched task in a free slot: an async job as a task on the loop, anything
        else here and now (the loop waits)."""
        if not self.watched and self._orphaned():
            self._hand_back(delivery, "its worker's supervisor died")
            self.stopping = True
            return
        slot = self.free.pop()
        self.done += 1
        run = self.processor.prepare(delivery)
        if isinstance(run, Verdict):
            self._end(slot, run)
        elif inspect.iscoroutinefunction(run.job.run):
            # Published now, not at its first step: a run before it may block the loop.
            self._publish(slot, run)
            task = coroutines.Interruptible(self._run_async(slot, run), loop=self.loop)
            self.runs[slot] = (delivery, task)
        else:
            self.current, self.index = delivery, slot  # what the alarm's guard publishes
            try:
                self._end(slot, self.processor.execute(run))
            finally:
                self.current = None

    def _end(self, slot: int, verdict: Verdict | None) -> None:
        self.runs.pop(slot, None)
        self.ended.append((slot, verdict))
        self.changed.set()

    async def _run_async(self, slot: int, run: Run) -> None:
        verdict = None
        try:
            verdict = await self._decide(slot, run)
        finally:
            self.lost.discard(key := (run.delivery.id, run.delivery.epoch))
            self.canceled.discard(key)
            self._end(slot, verdict)

    async def _decide(self, slot: int, run: Run) -> Verdict | None:
        """Run the handler (published in its slot) under its timeout; say what to write."""
        delivery, timeout, task = run.delivery, run.message.timeout, asyncio.current_task()
        assert isinstance(task, coroutines.Interruptible)
        started = self.processor.start(run)
        try:
            # A first delivery (epoch 1) has no earlier run that could still be running.
            if delivery.epoch != "1" and len(delivery.id) <= MAX_ID:
                await self._stale_run_ended(slot, run)
            timer = self.loop.call_later(
                timeout, task.interrupt, JobTimeout(f"timed out after {timeout:g} s")
            )
            try:
                await self._handler(run)
            finally:
                timer.cancel()
        except (Exception, asyncio.CancelledError) as exc:
            failure = coroutines.unwrap(exc, task.reason)
            error: BaseException | None = failure
            decision = policy.failed(failure, run.attempt)
        else:
            error, decision = None, policy.COMPLETED
        key = (delivery.id, delivery.epoch)
        if key in self.canceled and key not in self.lost and decision.fate is not Fate.CANCEL:
            # Canceled however its handler ended (as `Child._end_canceled` has it).
            how = "returned" if error is None else f"raised {type(error).__name__}"
            decision = policy.canceled(
                f"JobCanceled: task {delivery.id} was canceled while it ran (its handler {how})"
            )
        return self.processor.conclude(run, decision, started)

    def _publish(self, slot: int, run: Run) -> None:
        """Record the run in its slot, started now (a hand-made id too long for a slot is left
        to its lease, as in a one-task child)."""
        delivery, attempt = run.delivery, run.attempt
        if len(delivery.id) <= MAX_ID:
            self.table.set(slot, Running(
                delivery.id, self.queues.index(delivery.queue), delivery.epoch, time.monotonic(),
                run.message.timeout, attempt.number, attempt.max_attempts, attempt.backoff,
            ))  # fmt: skip

    async def _stale_run_ended(self, slot: int, run: Run) -> None:
        """Start no run of a task another slot of this worker still runs (see
        `Child._wait_for_stale_run`); its timeout starts once it does."""
        waited = False
        while self._stale(slot, run.delivery):
            await asyncio.sleep(STALE_POLL)
            waited = True
        if waited:
            self._publish(slot, run)

    async def _handler(self, run: Run) -> None:
        """The job's coroutine, marked as its task's run (as `execution.run_job` marks a sync
        one) and, with hygiene, between two closes of stale connections."""
        job, context = run.job, run.context
        current_task.set((job.name, context.job_id))  # in this task's own context only
        coroutine = job(context).run(run.payload)
        assert coroutine is not None
        if self.processor.hygiene:
            coroutine = coroutines.hygienic(coroutine, self._close_old_connections)
        if tracing.tracer is None:
            await coroutine
            return
        delivery, message = run.delivery, run.message
        with tracing.running(
            job.name, delivery.id, delivery.queue, run.attempt.number, message.trace
        ):
            await coroutine

    async def _close_old_connections(self) -> None:
        """`close_old_connections()` on the thread the async ORM runs on: one call for all the
        runs that ask while it is under way (100 runs starting together cost one hop to that
        thread, not 100)."""
        pending = self._closing
        if pending is None or pending.done():
            pending = self._closing = asyncio.ensure_future(coroutines.close_old_connections())
        await asyncio.shield(pending)


def main(
    broker: RedisBroker, queues: Sequence[str], table: SlotTable, slots: range, parent: int
) -> None:
    """Run an async child until it is told to stop, retires, or its supervisor `parent` dies
    (as `child.main` runs a one-task child)."""
    alive, watched = die_with_parent(parent)
    if alive:  # else the supervisor died before the kernel could be told: an orphan already
        AsyncChild(broker, queues, table, slots, parent, watched=watched).run()
