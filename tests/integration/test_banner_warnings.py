"""The worker's start-up warnings about a Redis that can lose queued work (on a private server:
the shared one's configuration is never changed)."""

from __future__ import annotations

import pytest

from django_jobs.worker.banner import redis_warnings


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl", "allkeys-random"])
def test_an_eviction_policy_is_warned_about(private_redis, policy):
    client = private_redis.client(decode_responses=True)
    client.config_set("save", "3600 1")  # persistent: only the policy to warn about
    client.config_set("maxmemory-policy", policy)

    (warning,) = redis_warnings(client)

    assert f"maxmemory-policy {policy}" in warning
    assert "Set 'maxmemory-policy noeviction'" in warning


def test_noeviction_with_aof_says_nothing(private_redis):
    client = private_redis.client(decode_responses=True)
    client.config_set("save", "3600 1")  # persistent: only the policy to warn about
    client.config_set("maxmemory-policy", "noeviction")

    assert redis_warnings(client) == []
