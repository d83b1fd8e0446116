"""On-commit enqueues: one batch per transaction and database alias, sent when it commits.

An enqueue with `on_commit=True` (or JOBS["ENQUEUE_ON_COMMIT"] inside atomic()), and the outbox's
fast path inside a transaction, add their submissions to the `CommitBatch` of the transaction;
the first of its Django on_commit callbacks to run sends them all, one call per backend (one
round trip per 500 tasks). What fails then is logged (`send_after_commit`): the transaction has
committed, so there is no caller to raise to.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_jobs.backends.base import Backend, Submission
from django_jobs.broker.protocol import Accepted
from django_jobs.conf.redact import REDACTED
from django_jobs.exceptions import BrokerUnavailable, DuplicateJob

if TYPE_CHECKING:
    from django_jobs.client import JobHandle

#: The client's logger: these lines are the client's enqueues, sent late.
logger = logging.getLogger("django_jobs.client")


def send_after_commit(
    backend: Backend, submissions: Sequence[Submission], deferred: Sequence[JobHandle]
) -> None:
    """Submit what waited for a commit; never raise into the commit hook.

    A duplicate idempotency key is logged (the original is on its way); Redis unavailable is
    logged with the ids of the jobs that may be lost: the transaction has committed, so nothing
    can be undone, and nothing retries them.
    """
    try:
        answers: Sequence[Accepted] = backend.submit(submissions)
    except BrokerUnavailable as exc:
        ids = ", ".join(f"{s.job.name} {s.message.id}" for s in submissions)
        logger.error(
            "enqueue after commit failed, so %d job(s) may be lost (the outbox would have kept "
            "them): %s; jobs: %s",
            len(submissions),
            exc,
            ids,
        )
        return
    for s, handle, accepted in zip(submissions, deferred, answers, strict=True):
        if accepted.duplicate_of is not None:
            assert s.message.idempotency_key is not None
            key = REDACTED if s.job.sensitive else s.message.idempotency_key
            duplicate = DuplicateJob(
                s.job.name, key, accepted.duplicate_of, accepted.duplicate_queue
            )
            logger.info("at commit: %s", duplicate)
        else:
            handle.state = accepted.state


class _Marker:
    """One deferred enqueue's on_commit callback; the first to run sends its whole batch.

    Django drops the callbacks registered inside a savepoint that rolls back (and all of them
    when the transaction rolls back); a dropped marker is freed at once, as nothing else holds
    it, so its batch sees that enqueue is void through a weak reference.
    """

    __slots__ = ("__weakref__", "batch")

    def __init__(self, batch: CommitBatch) -> None:
        self.batch = batch

    def __call__(self) -> None:
        self.batch.send()


class CommitBatch:
    """The on-commit enqueues of one transaction on one database connection.

    Each enqueue registers its own marker with Django's on_commit, which keeps track of the
    savepoints; when the transaction commits, the first marker to run submits every enqueue
    whose marker is still registered, in one call per backend: one round trip (per 500
    tasks) however many enqueues the transaction made.
    """

    _open: weakref.WeakKeyDictionary[BaseDatabaseWrapper, CommitBatch] = weakref.WeakKeyDictionary()

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.entries: list[
            tuple[weakref.ref[_Marker], Backend, Sequence[Submission], Sequence[JobHandle]]
        ] = []
        self.sent = False

    @classmethod
    def of(cls, connection: BaseDatabaseWrapper) -> CommitBatch:
        """The batch of the connection's current transaction (a new one after a commit or a
        rollback: every marker of a rolled-back transaction is gone)."""
        batch = cls._open.get(connection)
        if batch is None or batch.sent or not any(ref() for ref, *_ in batch.entries):
            batch = cls._open[connection] = cls(connection.alias)
        return batch

    def add(
        self, backend: Backend, submissions: Sequence[Submission], deferred: Sequence[JobHandle]
    ) -> None:
        marker = _Marker(self)
        self.entries.append((weakref.ref(marker), backend, submissions, deferred))
        transaction.on_commit(marker, using=self.alias)

    def send(self) -> None:
        if self.sent:
            return
        self.sent = True
        live = [entry for entry in self.entries if entry[0]() is not None]
        self.entries.clear()
        backends = {id(backend): backend for _, backend, _, _ in live}
        for key, backend in backends.items():
            mine = [entry for entry in live if id(entry[1]) == key]
            submissions = [s for _, _, subs, _ in mine for s in subs]
            handles = [h for _, _, _, hs in mine for h in hs]
            send_after_commit(backend, submissions, handles)
