"""A filtered listing across queues, paged: every match once, newest first across the queues,
whatever the page and chunk sizes (broker/listing.py merges one cursor per queue)."""

from __future__ import annotations

import random

import pytest

from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from tests.conftest import RedisNamespace
from tests.integration.test_inspector import Flaky, Noop, Note


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("per_page", "chunk"), [(2, 3), (3, 2), (1, 1), (5, 4), (50, 2), (50, 100)]
)
def test_pages__every_match_once_newest_first(
    redis_ns: RedisNamespace, seed: int, per_page: int, chunk: int
) -> None:
    # A queue's chunk may hold no match while its later (newer) tasks do: they must still come
    # before the older matches of the other queue.
    insp = get_inspector()
    rng = random.Random(seed)
    want = []
    for n in range(30):
        job = rng.choice([Noop, Flaky, Flaky])
        handle = job.enqueue(Note(str(n)), queue=rng.choice(["default", "low"]))
        if job is Noop:
            want.append(handle.id)
    want.reverse()  # newest first
    got: list[str] = []
    offsets = None
    for _ in range(100):
        page = insp.list_tasks(State.PENDING, ("default", "low"), offsets=offsets,
                               job=Noop.name, per_page=per_page, chunk=chunk)  # fmt: skip
        got += [t.id for t in page.items]
        offsets = page.next_offsets
        if offsets is None:
            break
    assert sorted(got) == sorted(want), "a match skipped or shown twice"
    assert got == want, "not newest first across the queues"
