"""Into Redis, for the workers: one round trip per batch of up to BATCH_SIZE tasks."""

from __future__ import annotations

from collections.abc import Sequence

from django_jobs.backends.base import Submission
from django_jobs.broker.factory import get_broker
from django_jobs.broker.protocol import Accepted, EnqueueRequest
from django_jobs.broker.redis import RedisBroker
from django_jobs.conf import get_settings

#: Most tasks written in one round trip.
BATCH_SIZE = 500


class RedisBackend:
    """Enqueue through the process's broker (`get_broker`), kept while the settings it was
    built for are the current ones (a new JOBS, as `override_settings` makes, gets its own)."""

    def __init__(self) -> None:
        self.broker: RedisBroker | None = None

    def submit(self, submissions: Sequence[Submission]) -> list[Accepted]:
        broker = self.broker
        if broker is None or broker.settings is not get_settings():
            broker = self.broker = get_broker()
        accepted: list[Accepted] = []
        for start in range(0, len(submissions), BATCH_SIZE):
            requests = []
            for s in submissions[start : start + BATCH_SIZE]:
                key = s.message.idempotency_key
                if key is not None:  # in the job type's home queue's slot (broker/handoff.py)
                    key = broker.keys(s.job.idempotency_queue()).idempotency(s.job.name, key)
                requests.append(
                    EnqueueRequest(
                        id=s.message.id,
                        queue=s.message.queue,
                        encoded=s.encoded,
                        delay=s.delay,
                        eta=s.eta,
                        idempotency_key=key,
                        idempotency_window=s.idempotency_window,
                    )
                )
            accepted += broker.enqueue(requests)
        return accepted
