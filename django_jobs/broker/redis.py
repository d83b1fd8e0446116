"""The Redis broker: one method per Lua script, one script per state transition.

Here, with the wire (connection.py), the code one task runs through (docs/concepts.rst,
`task-path`): its enqueue, the outcomes a worker child writes with its next fetch, that fetch's
first round trip (of one queue or several) and the idle wait. The rest is in the mixins below:
off that path, its code runs only when a fetch of several queues goes on past its first round
trip, fails or met a key of another type (fetch.py), for other calls, or on the rare path."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

from django_jobs.broker.cancel import CancelCalls
from django_jobs.broker.cluster_wait import ClusterWait
from django_jobs.broker.connection import NOTHING_ENQUEUED
from django_jobs.broker.errors import partly_enqueued
from django_jobs.broker.fetch import FETCH_FAILED, READY, Call, times
from django_jobs.broker.handoff import HandoffCalls, accepted
from django_jobs.broker.outcomes import OutcomeCalls
from django_jobs.broker.protocol import (
    Accepted,
    Delivery,
    EnqueueRequest,
    Verdict,
)
from django_jobs.broker.receipts import ReceiptCalls
from django_jobs.broker.replicas import replicated
from django_jobs.broker.sweeps import SweepCalls
from django_jobs.conf import JobsSettings
from django_jobs.keys import today

#: Day counters outlive their day by a week, so "today" and recent days can be read.
COUNTER_TTL = 8 * 86400


def _count(value: bytes) -> int:
    """A counter field of a task record; one written by hand as garbage counts as 0."""
    try:
        return int(value)
    except ValueError:
        return 0


class RedisBroker(HandoffCalls, CancelCalls, OutcomeCalls, ReceiptCalls, ClusterWait, SweepCalls):
    """The task state machine of DESIGN.md section 4 on one Redis server: the hot path's
    transitions here, the background loops' in sweeps.py, the read side and the operator's
    actions in inspect.py, the wire in connection.py."""

    def __init__(self, client: redis.Redis, settings: JobsSettings) -> None:
        super().__init__(client, settings)
        self._dequeue_keys: dict[tuple[str, ...], tuple[list[str], list[str]]] = {}
        #: The limits of this worker's job types, as dequeue takes them (`limits.dequeue_args`;
        #: set by the Processor): [] costs a dequeue nothing.
        self.limit_args: list[str | int] = []

    # -- enqueue ----------------------------------------------------------------------------

    def _enqueue_call(self, request: EnqueueRequest) -> tuple[list[str], list[Any]]:
        k = self.keys(request.queue)
        keys = [k.task(request.id), k.pending, k.scheduled, k.wake]
        if request.idempotency_key:
            keys.append(request.idempotency_key)
        window_ms = max(1, round(request.idempotency_window * 1000))
        eta = "" if request.eta is None else repr(request.eta)
        return keys, [request.id, request.encoded, repr(request.delay), eta, window_ms]

    def enqueue(self, requests: Sequence[EnqueueRequest]) -> list[Accepted]:
        """Enqueue tasks in one round trip, sent once (a lost reply is a BrokerUnavailable). A
        replay changes nothing while the records live; an ack with a retention of 0 deletes one,
        so only idempotency keys make a retry after a lost reply safe.

        A single task is one script call (with no idempotency key, straight to it: the common
        enqueue), and so is a batch of one queue with no idempotency keys and one due time
        (enqueue_many); anything else is one script call per task, pipelined. A task whose
        idempotency key is in another queue's slot (its job type's home queue) is handed off:
        three round trips (broker/handoff.py, whose code runs only then or for a duplicate)."""
        if self.shards.names:  # a sharded queue's tasks to its shards (broker/shards.py)
            requests = self.shards.route(requests)
        first = requests[0]
        if len(requests) == 1 and first.idempotency_key is None and not self.settings.replica_acks:
            keys, args = self._enqueue_call(first)  # the plain enqueue: straight to its call
            with self.unavailable(outcome=NOTHING_ENQUEUED):
                return [Accepted(state=self._call("enqueue", keys, args)[1].decode())]
        if len(requests) > 1 and all(
            (r.queue, r.delay, r.eta, r.idempotency_key)
            == (first.queue, first.delay, first.eta, None)
            for r in requests
        ):
            k = self.keys(first.queue)
            keys = [k.pending, k.scheduled, k.wake, *(k.task(r.id) for r in requests)]
            argv: list[Any] = [repr(first.delay), "" if first.eta is None else repr(first.eta)]
            for request in requests:
                argv += [request.id, request.encoded]
            with self.unavailable(outcome=NOTHING_ENQUEUED):
                if self.settings.replica_acks:
                    (reply,) = replicated(self, [("enqueue_many", keys, argv)], errors=False)
                else:
                    reply = self._call("enqueue_many", keys, argv)
            return [Accepted(state=reply[0].decode())] * len(requests)
        if any(self.handed_off(r) for r in requests):
            return self.enqueue_handing_off(requests)
        with self.unavailable(outcome=NOTHING_ENQUEUED):
            calls = [("enqueue", *self._enqueue_call(r)) for r in requests]
            if self.settings.replica_acks:  # then WAIT for replicas, in the same round trip
                replies = replicated(self, calls, errors=True)
            else:
                replies = self._pipeline(calls, errors=True)
        failed = [reply for reply in replies if isinstance(reply, ResponseError)]
        if failed:  # each task is its own script call: the others may have gone in
            raise partly_enqueued(self.url, failed, len(replies)) from failed[0]
        out = []
        for r, (status, value) in zip(requests, replies, strict=True):  # a loop: the hot path
            if status == b"duplicate":  # "<id>" or "<id> <queue>" (handoff.py)
                out.append(accepted([status.decode(), value.decode()], r.queue))
            else:
                out.append(Accepted(state=value.decode()))
        return out

    def handed_off(self, request: EnqueueRequest) -> bool:
        """Whether a request's idempotency key is in another slot than its queue's."""
        key = request.idempotency_key  # a prefix ends with "}": "{a}" is not one of "{ab}:..."
        return key is not None and not key.startswith(self.keys(request.queue).prefix)

    # -- consuming --------------------------------------------------------------------------

    def _dequeue_call(self, queues: Sequence[str], count: int) -> tuple[list[str], list[Any]]:
        cached = self._dequeue_keys.get(tuple(queues))
        if cached is None:
            keys: list[str] = []
            prefixes: list[str] = []
            for queue in queues:
                k = self.keys(queue)
                keys += [k.paused, k.pending, k.active, k.lease, k.dead]
                prefixes.append(k.task_prefix)
            cached = self._dequeue_keys[tuple(queues)] = (keys, prefixes)
        keys, prefixes = cached
        receipt = self._receipt(queues[0])  # one queue per call (fetch.py)
        return keys, [self.settings.lease, count, receipt, *prefixes, *self.limit_args]

    def fetch(
        self,
        queues: Sequence[str],
        count: int,
        *,
        own: bool,
        before: Sequence[Call] = (),
        lead: Sequence[tuple[Any, ...]] = (),
        first: int | None = None,
    ) -> tuple[list[Any], list[Delivery], Exception | None]:
        """Run `lead` commands and `before` script calls, then fetch up to count tasks: of one
        queue, or of several in strict priority (`_fetch_several`'s first round trip, then
        fetch.py's rounds if it does not settle there). Returns the replies of `lead` then
        `before` (errors as values), the tasks fetched, and the error of a dequeue refused (then
        no task: any taken are handed back). What fetches whose reply was lost took is given
        back first, in a round trip of its own (receipts.py: an idle wait's BLPOP comes after
        it, and the give-back's wake-up tokens end it)."""
        if self._unsure and self._receipt_pid == os.getpid():
            self._give_back(own=own)  # raises as the fetch would, the receipts kept
        self._issued = []
        try:
            if len(queues) > 1:
                return self._fetch_several(queues, count, own, before, lead, first)
            # One queue: its dequeue call (ack_dequeue with an ack before it), in one round
            # trip. The worker child's hot path with one queue: no more work than that.
            replies, fetched, _ = self._lead_round(queues[0], count, own, before, lead, ())
            if fetched is None or isinstance(fetched, Exception):
                return replies, [], fetched
            return replies, self._deliveries(queues, fetched), None
        except BaseException:
            # This fetch's, and those whose give-back above was refused before it ran (the
            # others went back: they never pile up through an outage).
            self._unsure += self._issued
            raise
        finally:
            self._issued = []

    def _fetch_several(
        self,
        queues: Sequence[str],
        count: int,
        own: bool,
        before: Sequence[Call],
        lead: Sequence[tuple[Any, ...]],
        first: int | None,
    ) -> tuple[list[Any], list[Delivery], Exception | None]:
        """`fetch` from several queues in strict priority (see fetch.py): the lead queue's
        dequeue, with the checks that no queue before it has a task ready. When they hold and
        the lead gives every task asked for, that is the fetch, in one round trip (a worker's
        steady state); else fetch.py's rounds go on from there (`_fetch_rounds`). `first` is
        the lead's index to start from (an idle wait woken by that queue)."""
        order = tuple(queues)
        at = self._leads.get(order, 0) if first is None else first
        broken = self._broken_now(queues) if self._broken_until else set()
        if broken and at in broken and len(broken) < len(queues):
            at = min(set(range(len(queues))) - broken)
        others, checks = self._checks(order, at, False, broken)
        replies, fetched, answers = self._lead_round(queues[at], count, own, before, lead, checks)
        if fetched is None or isinstance(fetched, Exception):
            return replies, [], fetched
        taken = self._deliveries([queues[at]], fetched)
        if taken and len(taken) == count and READY not in answers:
            # The queue this process last took a task from; of a sharded one, its next shard.
            self._leads[order] = self._next_lead(order, at) if self.shards.names else at
            return replies, taken, None
        opening = (others, answers, fetched, taken)
        got, failed = self._fetch_rounds(order, count, at, broken, opening, own)
        return replies, got, failed

    def _lead_round(
        self,
        queue: str,
        count: int,
        own: bool,
        before: Sequence[Call],
        lead: Sequence[tuple[Any, ...]],
        checks: Sequence[tuple[Any, ...]],
    ) -> tuple[list[Any], Any, list[Any]]:
        """The first round trip of a fetch: `lead` commands, `before` script calls, `checks`
        (`_checks`), then the dequeue of up to count tasks of queue: one ack_dequeue call with
        the ack last in `before` if it is of queue (another queue's is a call of its own: another
        slot). Returns the replies of lead and before (errors as values), the dequeue's (an
        error if refused; None if the ack was: nothing fetched), and the checks'."""
        keys, args = self._dequeue_call([queue], count)
        commands = list(lead)
        names: list[str | None] = [None] * len(lead)
        for call in before:  # a loop, not a generator: the hot path
            commands.append(self._command(call))
            names.append(call[0])
        ack = before[-1] if before and before[-1][0] == "ack" else None
        merged = ack is not None and ack[1][1] == self.keys(queue).active
        if merged:  # (its guard key left out: the dequeue's `paused` is one, see keys.py)
            assert ack is not None
            commands.pop()
            names.pop()
            call = ("ack_dequeue", [*ack[1][:5], *keys], [*ack[2], *args])
        else:
            call = ("dequeue", keys, args)
        commands += checks
        names += [None] * len(checks)
        commands.append(self._command(call))
        names.append(call[0])
        try:
            replies = self._send(commands, names, own=own)
        except BaseException as exc:  # what its dequeue took if its node answered (Cluster)
            self.hand_back(self._answered(exc, queue, merged), FETCH_FAILED)
            raise
        fetched = replies.pop()
        answers = replies[len(replies) - len(checks) :]
        del replies[len(replies) - len(checks) :]
        if merged:  # ack_dequeue answers {ack's reply, dequeue's}, or ack's error (no fetch)
            if isinstance(fetched, Exception):
                replies.append(fetched)
                return replies, None, answers
            acked, fetched = fetched
            replies.append(acked)
        return replies, fetched, answers

    def _checks(
        self, order: tuple[str, ...], at: int, full: bool, broken: set[int]
    ) -> tuple[list[int], list[tuple[Any, ...]]]:
        """The queues a round trip of a fetch of several queues looks at (by index; all of
        them when `full`, else those before the lead `at`), and the command asking each whether
        it has a task ready: `EXISTS paused pending pending`, READY (2) when its pending list
        exists (Redis deletes an empty one) and it is not paused (one key, one slot each)."""
        plan = None if broken else self._plans.get((order, at, full))
        if plan is None:
            level = self.shards.levels(order) if self.shards.names else range(len(order))
            others = [i for i in range(len(order)) if i != at and i not in broken]
            others = [i for i in others if full or level[i] < level[at]]  # a shard's: its own
            checks: list[tuple[Any, ...]] = []
            for i in others:
                k = self.keys(order[i])
                checks.append(("EXISTS", k.paused, k.pending, k.pending))
            plan = (others, checks)
            if not broken:
                self._plans[(order, at, full)] = plan
        return plan

    def _receipt(self, queue: str) -> str:
        """A new receipt for a dequeue call on queue, noted as the fetch's (receipts.py)."""
        pid = os.getpid()
        if pid != self._receipt_pid:  # a forked child: its own token, nothing of its parent's
            self._receipt_pid, self._receipt_token = pid, os.urandom(6).hex()
            self._receipt_count, self._issued, self._unsure = 0, [], []
        self._receipt_count += 1
        receipt = f"{self._receipt_token}.{self._receipt_count}"
        self._issued.append((queue, receipt))
        return receipt

    def _deliveries(self, queues: Sequence[str], flat: Sequence[Any]) -> list[Delivery]:
        # Raw bytes: the message may not be UTF-8 (a corrupt record reaches the processor, which
        # sends it to dead, not a failure here); so may a time field (the delivery's `problem`).
        if len(flat) % 9:
            self._warn_broken(flat[-1])
            flat = flat[:-1]
        elif self._broken:
            self._mend_broken(queues)
        out = []
        for i in range(0, len(flat), 9):
            index, task_id, raw, attempts, crashes, epoch, enqueued, unknown, deadline = flat[
                i : i + 9
            ]
            try:  # the common case, inline: two numbers, or none for first_unknown_at
                enqueued_at = float(enqueued) if enqueued else None
                first_unknown_at = float(unknown) if unknown else None
                problem = ""
            except ValueError:
                enqueued_at, first_unknown_at, problem = times(enqueued, unknown)
            out.append(
                Delivery(
                    id=task_id.decode(errors="replace"),
                    queue=queues[int(index)],
                    raw=raw,
                    attempts=_count(attempts),
                    crashes=_count(crashes),
                    epoch=epoch.decode(),
                    enqueued_at=enqueued_at,
                    first_unknown_at=first_unknown_at,
                    lease_deadline=float(deadline),
                    problem=problem,
                )
            )
        return out

    def settle(
        self, verdicts: Sequence[Verdict], queues: Sequence[str], count: int
    ) -> tuple[list[bool], list[Delivery]]:
        """Write finished runs' outcomes and fetch up to count new tasks, in one round trip:
        whether each verdict was written (False: stale, the task is no longer this run's) and
        the tasks fetched. The worker child's hot path: it runs on a connection of its own
        (see `_own_connection`), so only one thread may call it."""
        calls = [self._verdict_call(verdict) for verdict in verdicts]
        with self.unavailable():
            deliveries: list[Delivery] = []
            failed = None
            if count:  # the fetch (`fetch`), with the outcomes in its first round trip
                replies, deliveries, failed = self.fetch(queues, count, own=True, before=calls)
            else:
                replies = self._pipeline(calls, own=True, errors=True)
            for reply in replies:  # a loop, not a generator: the hot path
                if isinstance(reply, Exception):
                    failed = reply
                    break
            if failed is not None:
                # An outcome was refused but the fetch after it ran: hand what it fetched
                # back, or it would wait in active until its lease expires.
                self.hand_back(deliveries, "its fetch came with a refusal")
                raise failed
        return [bool(reply) for reply in replies], deliveries

    def _verdict_call(self, verdict: Verdict) -> tuple[str, list[str], list[Any]]:
        k = self.keys(verdict.queue)
        task = k.task(verdict.task_id)
        if verdict.action == "ack":
            keys = [task, k.active, k.lease, k.completed, k.processed(today()), k.guard]
            return "ack", keys, [verdict.task_id, verdict.epoch, verdict.retention, COUNTER_TTL]
        if verdict.action == "retry":
            keys = [task, k.active, k.lease, k.retry, k.failed(today()), k.guard]
            args = [verdict.task_id, verdict.epoch, verdict.delay, verdict.error,
                    verdict.traceback, int(verdict.spend), COUNTER_TTL,
                    int(verdict.unknown), self.settings.retention]  # fmt: skip
            return "retry", keys, args
        if verdict.action == "kill":
            keys = [task, k.active, k.lease, k.dead, k.failed(today()), k.guard]
            args = [verdict.task_id, verdict.epoch, verdict.error, verdict.traceback,
                    int(verdict.spend), COUNTER_TTL]  # fmt: skip
            return "kill", keys, args
        if verdict.action == "end_canceled":
            return self._cancel_call(verdict)
        raise ValueError(f"unknown verdict action {verdict.action!r}")

    def wait_and_fetch(self, queues: Sequence[str], timeout: float) -> list[Delivery]:
        """Block until a wake-up token for one of queues arrives or timeout seconds pass, then
        fetch one task as `dequeue_many` does: in one round trip.

        Redis runs a client's pipelined commands in order, so the fetch runs the moment the
        BLPOP returns. Like `settle`, it runs on this process's own connection; a signal handler
        may cut the block short with `interrupt_wait`. On a Cluster, one BLPOP per queue (each
        wake key on its own slot): cluster_wait.py."""
        if self.wire is not None:
            return self.cluster_wait(queues, timeout)
        wait = ("BLPOP", *(self.keys(queue).wake for queue in queues), timeout)
        with self.unavailable():
            (woken,), deliveries, failed = self.fetch(queues, 1, own=True, lead=[wait])
            if failed is not None:
                raise failed
        # A task fetched is handed out even if the BLPOP failed (a wake key of another type):
        # dropping it would strand it in active until its lease expires.
        if isinstance(woken, ResponseError) and not deliveries:
            # BLPOP fails at once on such a key: without this error, an idle child would
            # call again at once, forever. The worker backs off on it.
            raise self._wrong_wake_key(queues, woken)
        return deliveries
