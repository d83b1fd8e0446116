"""Redis behind Sentinel: a client of the current primary, through redis-py's `Sentinel`.

`factory.connect` calls `sentinel_client` for a `redis+sentinel://` URL (parsed by
`django_jobs.conf.redis_url`). The client's pool is a `SentinelConnectionPool`: every connection
it makes, the worker's own hot-path one included, asks the sentinels for the primary's address
when it (re)connects, and a connection to a primary demoted to a replica is closed on its first
read-only error, so the next call reaches the new primary. A `rediss+sentinel://` URL's
connections, to the sentinels and to the primary, use TLS with its options (redis-py's own).
"""

from __future__ import annotations

from typing import Any

import redis
from django.views.decorators.debug import sensitive_variables
from redis.connection import SSLConnection
from redis.sentinel import Sentinel, SentinelManagedConnection

from django_jobs.conf.redis_url import SentinelURL


class SentinelConnection(SentinelManagedConnection):
    """A sentinel-managed connection that asks the sentinels before every (re)connect.

    redis-py 8.1 connects a connection on its first send with `connect_check_health`, which
    skips `SentinelManagedConnection.connect` and its master lookup: a connection used outside
    the pool's get_connection (the worker's own, `interrupt_wait`'s) went to localhost:6379.
    """

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class SentinelTLSConnection(SentinelConnection, SSLConnection):
    """A SentinelConnection over TLS (redis-py's SentinelManagedSSLConnection, mended)."""


@sensitive_variables("target", "options")
def sentinel_client(target: SentinelURL, options: dict[str, Any]) -> redis.Redis:
    """A client of `target`'s primary; `options` are the connection's (timeouts, retry).

    The sentinels are asked with the same timeouts, without the primary's credentials.
    """
    timeouts: dict[str, Any] = {
        "socket_timeout": options["socket_connect_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
    }
    tls = target.tls or {}
    if target.tls is not None:
        timeouts.update(ssl=True, **tls)
    manager = Sentinel(list(target.sentinels), sentinel_kwargs=timeouts)  # type: ignore[no-untyped-call]
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        connection_class=SentinelConnection if target.tls is None else SentinelTLSConnection,
        **tls,
        **options,
    )
    return client
