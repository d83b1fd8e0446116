"""Idempotency keys scoped to the job type on every queue: the hand-off of an enqueue whose key
is in another queue's slot than its task.

A job type's idempotency key lives in one place, the slot of the job type's home queue
(`Job.idempotency_queue()`: its default queue): `<ns>:{<home>}:idem:<job>:<key>`, so the same
key is refused on every queue. An enqueue to the home queue sets it in the enqueue script
itself, in one round trip. An enqueue to another queue cannot (every script touches one Redis
Cluster slot), so it takes three, each one script on one slot:

1. `handoff` (the home's slot): take the key and keep the task's enqueue there, atomically, so
   a key is never taken without its task kept. A duplicate is refused here.
2. `enqueue` (the task's slot): write the task, with a copy of the key in its own slot
   (`<ns>:{<q>}:idem:<job>:<key>`), which makes this step safe to run again: a second run
   finds its own id there and writes nothing, even once the task ran and its record went.
3. `handoff_done` (the home's slot): forget the kept enqueue.

A caller that dies or loses Redis after step 1 loses nothing: a worker's recoverer finishes
every hand-off older than `GRACE` (`finish_handoffs`, each RECOVERER_INTERVAL), as step 2 and 3
would have. Until then, a duplicate is refused with the id of a task that is on its way. A task
refused in step 2 (its queue's keys of another type, or its copy of the key held by a task of an
earlier release) gives the key back in step 3.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace

from redis.exceptions import ResponseError

from django_jobs.broker.connection import NOTHING_ENQUEUED, refused
from django_jobs.broker.protocol import Accepted, Deleted, EnqueueRequest
from django_jobs.broker.schedules import ScheduleCalls
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.keys import logical_queue, queue_label, tagged_queue

logger = logging.getLogger("django_jobs.broker")

#: Seconds after which a hand-off is taken as left unfinished by its caller: well past the
#: three round trips of an enqueue, each bounded by ENQUEUE_TIMEOUT (finishing one twice is
#: harmless, this only saves the work).
GRACE = 30.0
#: Hand-offs finished per call of `finish_handoffs`.
BATCH = 100


def accepted(reply: Sequence[str], home: str) -> Accepted:
    """An enqueue script's reply as an Accepted; `home` is the queue whose slot holds its key.
    A key names "<id>" (a task on the key's home queue, as every key of earlier releases) or
    "<id> <queue>" (a task handed off to another queue)."""
    status, value = reply
    if status != "duplicate":
        return Accepted(state=value)
    task_id, _, queue = value.partition(" ")
    # The queue users know, not a shard of it (broker/shards.py).
    return Accepted(state="", duplicate_of=task_id, duplicate_queue=logical_queue(queue or home))


class HandoffCalls(ScheduleCalls):
    """The hand-off of enqueues whose idempotency key is in another queue's slot."""

    def enqueue(self, requests: Sequence[EnqueueRequest]) -> list[Accepted]:
        """RedisBroker's: step 2 goes through it."""
        raise NotImplementedError

    def handed_off(self, request: EnqueueRequest) -> bool:
        """RedisBroker's: whether a request's key is in another slot than its queue's (asked on
        every enqueue, so it lives with the enqueue)."""
        raise NotImplementedError

    def _moved(self, key: str, queue: str) -> str:
        """Key `key` of ours, in the slot of `queue` instead of its own."""
        return self.keys(queue).prefix + key[len(self.keys(tagged_queue(key)).prefix) :]

    def enqueue_handing_off(self, requests: Sequence[EnqueueRequest]) -> list[Accepted]:
        """Enqueue requests of which some are handed off (see the module's docstring): three
        round trips for the whole batch; the others go in with step 2."""
        handed = [i for i, request in enumerate(requests) if self.handed_off(request)]
        with self.unavailable(outcome=NOTHING_ENQUEUED):
            claims = self._pipeline([("handoff", *self._claim_call(requests[i])) for i in handed],
                                    errors=True)  # fmt: skip
        answers: dict[int, Accepted] = {}
        failed: list[ResponseError] = []
        claimed: dict[int, EnqueueRequest] = {}
        for i, reply in zip(handed, claims, strict=True):
            request = requests[i]
            key = request.idempotency_key
            assert key is not None
            if isinstance(reply, ResponseError):
                failed.append(reply)
            elif reply[0] == b"duplicate":
                answers[i] = accepted([part.decode() for part in reply], tagged_queue(key))
            else:
                claimed[i] = replace(request, idempotency_key=self._moved(key, request.queue))
        written = [i for i in range(len(requests)) if i not in handed or i in claimed]
        # Step 2. Should it fail (Redis unavailable, or refusing), what was claimed is finished
        # by the workers, and a refused task gives its key back then.
        batch = [claimed.get(i, requests[i]) for i in written]
        replies = dict(zip(written, self.enqueue(batch) if batch else [], strict=True))
        answers.update(replies)
        self._done([(requests[i], replies[i].duplicate_of is not None) for i in claimed])
        if failed:
            done = len(requests) - len(failed)
            outcome = f"{done} of these {len(requests)} tasks were enqueued, the rest were not"
            raise refused(self.url, failed[0], outcome=outcome) from failed[0]
        return [answers[i] for i in range(len(requests))]

    def _claim_call(self, request: EnqueueRequest) -> tuple[list[str], list[object]]:
        key = request.idempotency_key
        assert key is not None
        home = self.keys(tagged_queue(key))
        window_ms = max(1, round(request.idempotency_window * 1000))
        eta = "" if request.eta is None else repr(request.eta)
        args: list[object] = [request.id, request.queue, request.encoded, repr(request.delay),
                              eta, window_ms, self._moved(key, request.queue)]  # fmt: skip
        return [key, home.handoff, home.handoff_tasks], args

    def _done(self, finished: Sequence[tuple[EnqueueRequest, bool]]) -> None:
        """Step 3 for each (request, whether to give its key back); a failure is left to the
        workers, who finish a hand-off after GRACE (the tasks are written)."""
        if not finished:
            return
        calls = []
        for request, release in finished:
            key = request.idempotency_key
            assert key is not None
            home = self.keys(tagged_queue(key))
            keys = [home.handoff, home.handoff_tasks, *([key] if release else [])]
            calls.append(("handoff_done", keys, [request.id, f"{request.id} {request.queue}"]))
        try:
            with self.unavailable():
                self._pipeline(calls, errors=True)
        except BrokerUnavailable as exc:
            logger.info("hand-offs left for the workers to finish: %s", exc)

    def delete(self, queue: str, task_id: str, state: str, idempotency_key: str | None) -> Deleted:
        """InspectCalls.delete, for a key in another slot too: the task's copy of it released
        with the task, then the home's (two calls: a failure between them keeps the home's key
        until its window ends, refusing the job's key to the end of its window)."""
        if idempotency_key is None or idempotency_key.startswith(self.keys(queue).prefix):
            return super().delete(queue, task_id, state, idempotency_key)
        reply = super().delete(queue, task_id, state, self._moved(idempotency_key, queue))
        if reply is Deleted.DELETED:
            self.release_key(idempotency_key, task_id, queue)
        return reply

    def release_key(self, key: str, task_id: str, queue: str) -> bool:
        """Give back the home's idempotency key `key` of task `task_id` handed off to `queue`
        (an operator deleted the task) if the key still names it; True if it did."""
        home = self.keys(tagged_queue(key))
        keys = [home.handoff, home.handoff_tasks, key]
        return bool(self._run("handoff_done", keys, [task_id, f"{task_id} {queue}"]))

    def finish_handoffs(self, home: str, grace: float | None = None, limit: int = BATCH) -> int:
        """Finish the hand-offs of keys in `home`'s slot that their callers left unfinished
        (handed off more than `grace` seconds ago, default GRACE): steps 2 and 3. Returns how
        many."""
        k = self.keys(home)
        grace = GRACE if grace is None else grace
        flat = self._run_raw("handoff_due", [k.handoff, k.handoff_tasks], [grace, limit],
                             writes=False)  # fmt: skip
        requests, broken = [], []
        for task_id, entry in zip(flat[::2], flat[1::2], strict=True):
            try:
                kept = json.loads(entry)
                requests.append(
                    EnqueueRequest(
                        id=task_id.decode(),
                        queue=kept["queue"],
                        encoded=kept["msg"],
                        eta=float(kept["eta"]) if kept["eta"] else None,
                        idempotency_key=kept["key"],
                        idempotency_window=int(kept["window"]) / 1000,
                    )
                )
            except (ValueError, KeyError, TypeError):  # nothing to finish: forgotten
                broken.append(task_id.decode(errors="replace"))
        if broken:
            with self.unavailable():
                self._pipeline(
                    [("handoff_done", [k.handoff, k.handoff_tasks], [i, ""]) for i in broken]
                )
        if not requests:
            return len(broken)
        with self.unavailable():
            replies = self._pipeline([("enqueue", *self._enqueue_call(r)) for r in requests],
                                     errors=True)  # fmt: skip
        finished = []
        for request, reply in zip(requests, replies, strict=True):
            # Given back: refused, or its copy held by another task (a replay of this very
            # enqueue finds its own id there and answers "exists").
            release = isinstance(reply, ResponseError) or reply[0] == b"duplicate"
            if isinstance(reply, ResponseError):
                logger.error("handed-off task %s was refused by its queue %s, so its "
                             "idempotency key is given back: %s", request.id,
                             queue_label(request.queue), reply)  # fmt: skip
            assert request.idempotency_key is not None
            key = self._moved(request.idempotency_key, home)
            finished.append((replace(request, idempotency_key=key), release))
        self._done(finished)
        return len(requests) + len(broken)
