"""The connections an enqueue travels on (issue 22: single-call enqueue at the round-trip floor).

An enqueue (any call safe to run twice: `ScriptCalls._round_trip`) goes on a connection
of the broker's spares, outside redis-py's pool: taken by one caller, given back after its
reply, reused by the next caller, whatever its thread. No lock; a connection the server closed
meanwhile is found before the call is sent and reopened (test_enqueue_resend.py: never resent).
Each test has a Redis of its own, so that its connections are the only ones counted.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any

import pytest
import redis
from redis._parsers import hiredis as hiredis_parser

from django_jobs.broker import connection
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from tests.conftest import RedisServer

THREADS = 8


@pytest.fixture
def probe(private_redis: RedisServer, settings: Any) -> redis.Redis:
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t", "ENQUEUE_TIMEOUT": 1}
    return private_redis.client(decode_responses=True)


def put(task_id: str, delay: float = 0.0) -> str:
    """Enqueue one task; its state."""
    (accepted,) = get_broker().enqueue([EnqueueRequest(task_id, "default", "{}", delay=delay)])
    return str(accepted.state)


def others(probe: redis.Redis) -> set[str]:
    """The ids of the connections to Redis other than the probe's own."""
    return {c["id"] for c in probe.client_list() if c["cmd"] != "client|list"}


@pytest.fixture
def pool_gets(monkeypatch: pytest.MonkeyPatch, probe: redis.Redis) -> list[int]:
    """Counts the connections taken from the broker's redis-py pool."""
    pool = get_broker().client.connection_pool
    taken: list[int] = []
    original = pool.get_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        taken.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    return taken


def test_enqueue__takes_no_connection_from_the_pool_and_keeps_one(
    probe: redis.Redis, pool_gets: list[int]
) -> None:
    put("warm-up")  # the script loaded (on a pool connection: NOSCRIPT), a spare opened
    opened = others(probe)
    pool_gets.clear()

    for n in range(50):
        put(f"t{n}")

    assert pool_gets == []
    assert others(probe) == opened
    assert probe.llen("t:{default}:pending") == 51


def test_enqueue__a_spare_idle_past_spare_idle_is_reopened_before_its_call(
    probe: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A load balancer or NAT between us and Redis may forget an idle connection without a word:
    # the pre-send check cannot see it, and an enqueue is never sent twice, so a spare idle
    # for longer than SPARE_IDLE is reopened before it carries a call.
    now = [1000.0]
    monkeypatch.setattr(connection.time, "monotonic", lambda: now[0])
    assert put("a" * 32) == "pending"
    first = others(probe)

    now[0] += connection.SPARE_IDLE - 1  # idle, but not for long: the same connection
    assert put("b" * 32) == "pending"
    assert others(probe) == first

    now[0] += connection.SPARE_IDLE + 1  # idle for long: closed, and a new one carries it
    assert put("c" * 32) == "pending"
    after = others(probe)
    assert len(after) == len(first)  # the pool's, and a spare
    assert after != first  # a new spare


def test_enqueue__threads_at_once_open_one_connection_each_at_most_then_reuse_them(
    probe: redis.Redis, pool_gets: list[int]
) -> None:
    put("warm-up")
    before = others(probe)
    pool_gets.clear()
    wave_ids: list[set[str]] = []

    def wave(name: str, count: int) -> None:
        barrier = threading.Barrier(count)

        def enqueue(t: int) -> None:
            barrier.wait(timeout=10)
            for n in range(25):
                put(f"{name}-{t}-{n}")

        threads = [threading.Thread(target=enqueue, args=(t,)) for t in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        wave_ids.append(others(probe))

    wave("a", THREADS)
    # As many new threads as the spares the first wave left (as many as it ran calls at once):
    # they find one each, and nothing is opened for them.
    spares = len(get_broker()._spares[1])
    wave("b", spares)

    assert probe.llen("t:{default}:pending") == 1 + (THREADS + spares) * 25
    assert 1 <= spares <= THREADS
    assert len(wave_ids[0] - before) == spares - 1, "the warm-up's spare, and one a thread"
    assert wave_ids[1] == wave_ids[0]
    assert pool_gets == []


def test_enqueue__a_forked_child_sends_on_a_connection_of_its_own(probe: redis.Redis) -> None:
    put("warm-up")  # the parent's connection, in the broker the child inherits
    before = others(probe)
    sent, done = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: enqueue, say so, wait to be told to exit
        code = 1
        try:
            code = 0 if put("from-child") == "pending" else 2
        finally:
            os.write(sent[1], bytes([code]))
            os.read(done[0], 1)
            os._exit(code)
    try:
        assert os.read(sent[0], 1) == b"\x00"
        during = others(probe)
    finally:
        os.write(done[1], b".")
        _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert before < during, "the child opened a connection of its own"
    assert put("after") == "pending"  # the parent's connection is still sound
    assert probe.lrange("t:{default}:pending", 0, -1) == ["after", "from-child", "warm-up"]


@pytest.mark.parametrize("poll", [True, False], ids=["select.poll", "no-select.poll"])
def test_enqueue__connections_the_server_closed_are_reopened_and_the_call_goes_in(
    probe: redis.Redis, poll: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not poll:  # Windows has no select.poll (gevent's patched select has one of its own)
        monkeypatch.delattr(select, "poll")
        monkeypatch.setattr(hiredis_parser, "_HAS_POLL", False)  # redis-py's, read at import
    put("warm-up")
    probe.client_kill_filter(_type="normal", skipme=True)  # as an idle timeout would

    assert put("a") == "pending"
    assert probe.lrange("t:{default}:pending", 0, -1) == ["a", "warm-up"]


def test_enqueue__after_a_restart_of_redis_every_spare_connection_reconnects(
    private_redis: RedisServer, probe: redis.Redis
) -> None:
    barrier = threading.Barrier(4)

    def enqueue(name: str) -> None:
        barrier.wait(timeout=10)
        put(name)

    for wave in ("a", "b"):
        threads = [threading.Thread(target=enqueue, args=(f"{wave}{t}",)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        if wave == "a":
            private_redis.restart()  # every spare connection now dead

    assert sorted(probe.lrange("t:{default}:pending", 0, -1)) == ["b0", "b1", "b2", "b3"]


def test_enqueue__a_call_that_timed_out_never_leaves_its_reply_to_the_next(
    private_redis: RedisServer, probe: redis.Redis
) -> None:
    put("warm-up")
    private_redis.freeze()
    try:
        with pytest.raises(BrokerUnavailable):
            put("a")  # its reply, if Redis runs it once thawed, is {"ok", "pending"}
    finally:
        private_redis.thaw()

    assert put("b", delay=60) == "scheduled"
    assert probe.zrange("t:{default}:scheduled", 0, -1) == ["b"]
