"""An idle child's wait on a Cluster whose BLPOP answer is lost (cluster_wait.py): the BLPOP may
have taken the wake-up token of a task, so the fetch after it still looks at that queue, and the
task is handed out now, not after a wait no token ends. On one server the BLPOP and the fetch
are one round trip (tests/integration/test_replay_safety.py covers that reply lost)."""

from __future__ import annotations

import time

from django_jobs.broker.redis import RedisBroker
from tests.conftest import RedisNamespace
from tests.integration.test_replay_safety import (  # noqa: F401 (the fixture)
    LosingProxy,
    opened,
    proxied,
    request,
)


def test_cluster_wait__a_blpop_answer_lost_still_fetches_the_task_its_token_was_for(
    proxied: tuple[RedisBroker, LosingProxy],  # noqa: F811
    redis_ns: RedisNamespace,
) -> None:
    # Given an idle child's connections open, and a task with its token on `default`
    broker, proxy = proxied
    opened(broker)
    broker.enqueue([request("a" * 32)])

    # When its wait's BLPOP takes the token and the answer is lost with the connection
    proxy.lose_next.set()
    started = time.monotonic()
    fetched = broker.wait_and_fetch(["default"], 20.0)

    # Then the fetch after it took the task all the same, without waiting out the BLPOP
    assert [d.id for d in fetched] == ["a" * 32]
    assert time.monotonic() - started < 10.0
    assert not proxy.lose_next.is_set(), "no reply was lost"
    with redis_ns.client.pipeline(transaction=False) as pipe:
        pipe.llen(broker.keys("default").wake)
        pipe.lrange(broker.keys("default").active, 0, -1)
        assert pipe.execute() == [0, [b"a" * 32]]
