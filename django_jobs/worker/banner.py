"""What a worker says at start-up: its shape, and what in Redis could lose its work."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from django.conf import settings as django_settings

from django_jobs.broker.redis import RedisBroker


def banner(
    broker: RedisBroker, queues: Sequence[str], concurrency: int, async_concurrency: int = 1
) -> list[str]:
    """Return the start-up lines: namespace, queues, concurrency, database connections."""
    aliases = len(django_settings.DATABASES)
    lines = [
        f"django-jobs worker on {broker.url} (namespace {broker.settings.namespace!r})",
        f"queues in priority order: {', '.join(queues)}",
        f"concurrency {concurrency}: up to {concurrency * aliases} database connection(s) "
        f"({concurrency} child process(es) x {aliases} database alias(es)); size your "
        f"database's max_connections and pooler for every worker you run",
    ]
    if async_concurrency > 1:
        lines.append(
            f"async concurrency {async_concurrency}: each child runs up to {async_concurrency} "
            f"tasks at once on an event loop, {concurrency * async_concurrency} in all; a child "
            "running async handlers may hold one more connection per alias (the thread Django's "
            "async ORM runs on)"
        )
    return lines


def redis_warnings(client: redis.Redis) -> list[str]:
    """Return warnings about a Redis that can lose queued work (empty if it cannot tell)."""
    warnings = []
    try:
        persistence = client.info("persistence")
        memory = client.info("memory")
        save = client.config_get("save").get("save", "")
    except redis.ResponseError:
        return []  # CONFIG or INFO disabled (managed Redis): nothing to say
    if not persistence.get("aof_enabled") and not save:
        warnings.append(
            "Redis keeps nothing on disk (no AOF, no RDB snapshots): a Redis restart loses every "
            "queued task. Set 'appendonly yes' (and 'appendfsync everysec') in redis.conf."
        )
    policy = memory.get("maxmemory_policy", "noeviction")
    if policy != "noeviction":
        warnings.append(
            f"Redis evicts keys under memory pressure (maxmemory-policy {policy}): queued tasks "
            "can vanish. Set 'maxmemory-policy noeviction' for the jobs Redis."
        )
    return warnings


def evictions(client: redis.Redis) -> tuple[int, str] | None:
    """How many keys Redis has evicted since it started, and its maxmemory-policy; None when it
    cannot tell (INFO disabled). The janitor logs what this count grows by."""
    try:
        evicted = client.info("stats").get("evicted_keys", 0)
        policy = client.info("memory").get("maxmemory_policy", "noeviction")
    except redis.ResponseError:
        return None
    return int(evicted), str(policy)
