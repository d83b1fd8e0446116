"""A worker holding a stale and a new run of one task: the heartbeat reports the stale one.

Found by review: extend_lease answered with ids only, so the heartbeat reported the first run
of that id in slot order, and the supervisor interrupted the NEW run (which then wrote nothing
and waited out its lease) instead of the stale one.
"""

from __future__ import annotations

from django_jobs.broker.protocol import Delivery, EnqueueRequest
from django_jobs.client import get_broker
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace


def test_heartbeat__a_stale_and_a_new_run_of_one_task_report_the_stale_one(
    redis_ns: RedisNamespace,
) -> None:
    broker = get_broker()
    broker.enqueue([EnqueueRequest(id="a" * 32, queue="default", encoded='{"v": 1}')])
    stale = broker.dequeue(["default"])
    assert stale is not None
    broker.client.zadd(broker.keys("default").lease, {stale.id: 0})
    assert broker.recover("default") == [(stale.id, "pending")]
    new = broker.dequeue(["default"])  # handed back to this worker: a newer epoch
    assert new is not None
    assert new.epoch != stale.epoch
    reported: list[Delivery] = []
    beat = Heartbeat(
        broker, "w", {}, lambda: [new, stale], on_lost=lambda d, _s: reported.append(d)
    )

    beat.renew()

    assert [(d.id, d.epoch) for d in reported] == [(stale.id, stale.epoch)]
    assert beat.lost == {(stale.id, stale.epoch)}
    # The new run's lease was renewed, not reported
    assert broker.client.zscore(broker.keys("default").lease, new.id) > 0
