"""The broker scripts' shared pieces are written once, in _prelude.lua, and composed in
(issue 13): the stale-epoch guard, the wake-up token push, the crash-count rule, the clock, the
release of an idempotency key."""

from __future__ import annotations

import re

import pytest

from django_jobs.broker import scripts

#: A piece, and a pattern that finds it written out again in a script's own body.
PIECES = {
    "held": r"fields\([^,]+, 'state', 'epoch'",
    "wake": r"'LPUSH', [^,]+, '1'",
    "crashed": r"crashed its worker",
    "clock": r"redis\.call\('TIME'\)",
    "ended": r"status == 'succeeded' or",
    "release_key": r"redis\.call\('GET', [^)]+\) == ",
}


def bodies() -> dict[str, str]:
    return {name: body for name, (_, body) in scripts._PARTS.items()}


@pytest.mark.parametrize("piece", sorted(PIECES))
def test_script_bodies__a_shared_piece_is_not_written_again(piece: str) -> None:
    again = [name for name, body in bodies().items() if re.search(PIECES[piece], body)]

    assert again == []
    assert re.search(PIECES[piece], scripts.HELPERS[piece])


@pytest.mark.parametrize(
    ("script", "pieces"),
    [
        ("ack", {"held", "clock", "release", "unpark"}),
        ("retry", {"claim", "held", "clock", "release"}),
        ("kill", {"claim", "held", "clock", "release"}),
        ("requeue", {"claim", "held", "crashed", "back", "wake", "release"}),
        ("recover", {"crashed", "back", "wake", "clock", "release", "unpark"}),
        ("ack_dequeue", {"held", "release", "unpark", "bury", "stamp"}),
        ("enqueue_many", {"wake", "clock"}),
        ("forward", {"wake", "clock"}),
        ("run_now", {"wake"}),
        ("flow_acquire", {"ended"}),
        ("flow_cancel", {"ended"}),
        ("flow_signal", {"ended"}),
        ("delete", {"wrong_type", "release_key"}),
        ("handoff_done", {"wrong_type", "release_key"}),
    ],
)
def test_script_sources__compose_the_pieces_they_call(script: str, pieces: set[str]) -> None:
    defined = set(re.findall(r"^local function (\w+)\(", scripts.SOURCES[script], re.M))

    assert pieces <= defined


def test_prelude__every_piece_has_its_contract_comment() -> None:
    for name, text in scripts.HELPERS.items():
        assert f"\n-- {name}(" in f"\n{text}", name


#: A script building keys inside Lua: a helper that does (the limit keys, the canceled set),
#: or a key made of the task prefix and an id, or of the queue's prefix.
BUILDS_KEYS = re.compile(r"\b(?:release|unpark|unwanted)\(|ARGV\[\d\] \.\. \w+|prefix \.\. '")


def test_script_bodies__one_that_builds_keys_in_lua_names_the_queues_guard_key() -> None:
    # On a Redis Cluster only the keys a script names make a node moving the slot refuse it
    # (TRYAGAIN) before it starts (keys.QueueKeys.guard); a key built in Lua is found moved
    # half-way. dequeue names the queue's paused key instead, for the same end.
    unguarded = [
        name
        for name, body in bodies().items()
        if BUILDS_KEYS.search(body) and ":guard" not in body and name != "dequeue"
    ]

    assert unguarded == []
