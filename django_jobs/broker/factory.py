"""How a broker is made: `connect(url)`, the redis-py client for a URL (one server, Sentinel or
a Cluster), and `get_broker()`, the one RedisBroker of this process for the current settings.
Neither runs on a task's path once the broker is built (docs/concepts.rst, `task-path`)."""

from __future__ import annotations

from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured
from django.views.decorators.debug import sensitive_variables
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_jobs.broker.cluster import cluster_client
from django_jobs.broker.connection import redact, unavailable
from django_jobs.broker.redis import RedisBroker
from django_jobs.broker.topology import sentinel_client
from django_jobs.conf import JobsSettings, get_settings
from django_jobs.conf.redis_url import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    parse_cluster_url,
    parse_sentinel_url,
)
from django_jobs.exceptions import JobsDisabled


@sensitive_variables("url")
def connect(url: str, timeout: float, *, blocking: float = 0.0) -> redis.Redis:
    """Return a client for url whose calls give up after about `timeout` seconds in all.

    One retry, for the calls on the pool's connections that are safe to run twice (a dequeue
    and an enqueue never go through it: `ScriptCalls._round_trip`). `blocking`
    is the longest BLPOP the client will issue, added to its read timeout. A URL that does not
    parse is an ImproperlyConfigured naming it redacted (redis-py's would show the password).
    A `redis+sentinel://` URL gives a client of the primary the sentinels name
    (`topology.sentinel_client`), a `redis+cluster://` URL a RedisCluster
    (`cluster.cluster_client`; BrokerUnavailable when no node answers), with the same options.
    """
    scheme = url.partition("://")[0]
    try:
        sentinel = parse_sentinel_url(url) if scheme in SENTINEL_SCHEMES else None
        cluster = parse_cluster_url(url) if scheme in CLUSTER_SCHEMES else None
        if sentinel is None and cluster is None:
            redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"JOBS['REDIS_URL'] cannot be parsed ({redact(url)}): {str(exc).split(' as ')[0]}. "
            "Percent-encode a password holding '/', '?', '#' or '@' (urllib.parse.quote)."
        ) from None
    half = timeout / 2
    options: dict[str, Any] = {
        "socket_connect_timeout": half,
        "socket_timeout": half + blocking,
        "retry": Retry(NoBackoff(), 1),
        "decode_responses": True,
        # No health checks: a new connection's first one pings with retries of its own, which
        # doubled the time a call took to give up on a frozen Redis. A spare connection the
        # server closed is reopened before its call is sent (_round_trip); a silent one times out.
        "health_check_interval": 0,
    }
    if sentinel is not None:
        return sentinel_client(sentinel, options)
    if cluster is not None:
        with unavailable(redact(url), writes=False):
            # A RedisCluster is a Redis to the broker: the same commands, routed by slot.
            return cluster_client(cluster, options)  # type: ignore[return-value]
    return redis.Redis.from_url(url, **options)


_broker: tuple[JobsSettings, RedisBroker] | None = None


@sensitive_variables("settings")  # its redis_url may hold a password (Django's debug page)
def get_broker() -> RedisBroker:
    """Return the broker for the current settings (one client per process and settings).

    Raises JobsDisabled when REDIS_URL is not set, whatever WHEN_DISABLED says: the admin, the
    API, the worker and JobHandle.refresh need Redis itself.
    """
    global _broker
    settings = get_settings()
    if _broker is None or _broker[0] is not settings:
        if not settings.enabled:
            raise JobsDisabled(
                f'Jobs are disabled: JOBS["REDIS_URL"] is not set, so there is no Redis to talk '
                f'to (JOBS["WHEN_DISABLED"] is {settings.when_disabled!r}, which decides only '
                f"what enqueue does). Set REDIS_URL (for example redis://127.0.0.1:6379/0) to "
                f"enable jobs."
            )
        assert settings.redis_url is not None
        client = connect(settings.redis_url, settings.enqueue_timeout)
        _broker = (settings, RedisBroker(client, settings))
    return _broker[1]
