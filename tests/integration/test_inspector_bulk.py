"""delete_all_dead while another operator deletes too: every dead task is still visited.

Found by review: a task deleted by someone else between the listing and our delete counted as
one "left in the dead set", so the next batch started one further and stepped over a task that
was still dead.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs import inspector
from django_jobs.broker.protocol import Deleted
from django_jobs.inspector import Inspector, get_inspector
from django_jobs.keys import State
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace
from tests.integration.test_inspector import Fails, Note, depths


def test_delete_all_dead__another_operators_deletes_meanwhile_skip_nothing(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    insp: Inspector = get_inspector()
    monkeypatch.setattr(inspector, "BATCH_SIZE", 2)
    Fails.enqueue_many([Note(str(n)) for n in range(5)])
    run_burst()
    _total, dead = insp.broker.state_ids("default", State.DEAD, 0, -1, newest_first=False)
    real_delete = insp.broker.delete
    calls: list[str] = []

    def delete(queue: str, task_id: str, state: str, key: str | None) -> Any:
        if not calls:  # the other operator deletes the batch's second task first
            assert real_delete(queue, dead[1], state, None) is Deleted.DELETED
        calls.append(task_id)
        return real_delete(queue, task_id, state, key)

    monkeypatch.setattr(insp.broker, "delete", delete)

    assert insp.delete_all_dead("default") == 4  # the fifth went by the other's hand

    assert depths(insp)["dead"] == 0
