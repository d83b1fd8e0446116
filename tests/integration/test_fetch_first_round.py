"""What a fetch's first round trip holds (RedisBroker._lead_round, in redis.py), and what it
leaves to fetch.py.

- The ack of the task before goes into the dequeue's script call (ack_dequeue) only when the two
  are of one queue: an ack of another queue's task is a script call of its own in the same
  round trip (ack_dequeue with the keys of two queues would be two slots: CROSSSLOT on a
  Cluster, where this file runs too).
- A queue whose keys had another type is left out of the ready checks for a while
  (fetch.BROKEN_PAUSE); once that passes it is forgotten, so a healed queue's fetch runs no
  code of fetch.py again.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs.broker import fetch
from django_jobs.broker.connection import ScriptCalls
from django_jobs.client import get_broker
from tests.conftest import RedisNamespace
from tests.integration.test_fetch_rounds import Rounds, ack, put, rounds, settle  # noqa: F401
from tests.integration.test_scripts_atomic import foreign
from tests.integration.test_task_path import modules_run
from tests.redis_state import q


@pytest.fixture
def scripts_sent(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The script of each command a fetch sends (None for a plain command), in order."""
    names: list[str | None] = []
    original = ScriptCalls._send

    def recorded(self: ScriptCalls, commands: Any, calls: list[str | None], **kw: Any) -> Any:
        names.extend(calls)
        return original(self, commands, calls, **kw)

    monkeypatch.setattr(ScriptCalls, "_send", recorded)
    return names


def test_fetch__an_ack_of_another_queues_task_is_a_call_of_its_own_in_the_same_round_trip(
    rounds: Rounds,  # noqa: F811
    scripts_sent: list[str | None],
    redis_ns: RedisNamespace,
) -> None:
    put("low", "l1")
    (held,) = get_broker().dequeue_many(["low"], 1)
    put("default", "d1")
    rounds.take()
    scripts_sent.clear()

    nxt = settle(held, ["default"])  # a child of default that held low's task

    assert (nxt and nxt.id, rounds.take()) == ("d1", 1)
    assert scripts_sent == ["ack", "dequeue"]
    ns = redis_ns.namespace
    # Both ran: low's task acked (completed, out of low's active), default's task taken.
    assert redis_ns.client.hget(f"{ns}:{{low}}:t:l1", "state") == b"completed"
    assert redis_ns.client.lrange(f"{ns}:{{low}}:active", 0, -1) == []
    assert redis_ns.client.lrange(f"{ns}:{{default}}:active", 0, -1) == [b"d1"]
    # And an ack of the lead queue's own task is merged into its dequeue, as before.
    scripts_sent.clear()
    assert settle(nxt, ["default"]) is None
    assert scripts_sent == ["ack_dequeue"]


def test_fetch__a_healed_queue_is_forgotten_once_its_pause_passes(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetch, "BROKEN_PAUSE", 0.0)  # over as soon as it starts
    queues = ["critical", "default"]
    broker = get_broker()
    put("critical", "c1", "c2", "c3")
    put("default", "d1")
    lease = foreign(redis_ns, q("lease", "critical"))  # critical's dequeue finds it: skipped
    (first,) = broker.dequeue_many(queues, 1)
    assert first.id == "d1"
    assert list(broker._broken_until) == ["critical"]

    redis_ns.client.delete(lease)  # healed
    second = settle(first, queues)  # critical is ready again: its task, in order
    assert second is not None
    assert second.id == "c1"
    assert broker._broken_until == {}
    with modules_run() as ran:
        third = settle(second, queues)  # the lead's own task, settled in the first round trip

    assert third is not None
    assert third.id == "c2"
    assert "broker/fetch.py" not in ran, ran
