"""The Redis fixtures other tests rely on: isolation and a server a test can stop."""

import pytest
import redis

from tests.conftest import RedisNamespace, RedisServer


def test_redis_ns__cleans_only_its_own_keys(redis_ns: RedisNamespace) -> None:
    outsider = f"outside-{redis_ns.namespace}"
    redis_ns.client.set(outsider, "keep", ex=60)
    redis_ns.client.set(f"{redis_ns.namespace}:x", "drop")

    redis_ns.cleanup()

    assert redis_ns.keys() == []
    assert redis_ns.client.get(outsider) == b"keep"
    redis_ns.client.delete(outsider)


def test_private_redis__stops_and_restarts_empty(private_redis: RedisServer) -> None:
    private_redis.client().set("k", "v")

    private_redis.stop()
    with pytest.raises(redis.ConnectionError):
        private_redis.client(socket_connect_timeout=0.2).ping()
    private_redis.start()

    assert private_redis.client().get("k") is None
