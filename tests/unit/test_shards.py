"""Sharded queues (issue 20): JOBS["QUEUES"] as a mapping with shards, its checks, the shards'
names and slots, and how an enqueue picks a shard (django_jobs/broker/shards.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redis.crc import key_slot

from django_jobs.broker.info import QueueInfo
from django_jobs.broker.protocol import EnqueueRequest
from django_jobs.broker.shards import Shards, merged, shard_names
from django_jobs.checks import check_settings
from django_jobs.conf import get_settings
from django_jobs.keys import QueueKeys, logical_queue

SHARDED = {"critical": {}, "default": {"shards": 8}, "low": {}}


def messages(jobs: Any) -> list[tuple[str, str, str]]:
    with override_settings(JOBS=jobs):
        return [(m.id or "", m.msg, m.hint or "") for m in check_settings()]


def test_queues__a_mapping_of_options_is_read_in_its_order() -> None:
    with override_settings(JOBS={"QUEUES": SHARDED}):
        settings = get_settings()
    assert settings.queues == ("critical", "default", "low")
    assert settings.queue_shards == {"critical": 1, "default": 8, "low": 1}
    assert messages({"QUEUES": SHARDED}) == []


def test_queues__a_list_has_one_shard_each() -> None:
    with override_settings(JOBS={"QUEUES": ["a", "b"]}):
        assert get_settings().queue_shards == {"a": 1, "b": 1}


@pytest.mark.parametrize(
    ("queues", "id_", "words"),
    [
        ({"default": {"shards": 0}}, "django_jobs.E051", "not a whole number from 1 to 64"),
        ({"default": {"shards": 65}}, "django_jobs.E051", "not a whole number from 1 to 64"),
        ({"default": {"shards": "8"}}, "django_jobs.E051", "not a whole number from 1 to 64"),
        ({"default": {"shards": True}}, "django_jobs.E051", "not a whole number from 1 to 64"),
        ({"default": {"shards": 2.0}}, "django_jobs.E051", "not a whole number from 1 to 64"),
        ({"default": {"shard": 8}}, "django_jobs.E051", "unknown options: shard"),
        ({"default": 8}, "django_jobs.E051", "not a dict of options"),
        ({"default": None}, "django_jobs.E051", "not a dict of options"),
        ({}, "django_jobs.E005", "not a non-empty list of names"),
        ({"de#fault": {}}, "django_jobs.E005", "invalid queue names"),
        ({"a{b}": {"shards": 2}}, "django_jobs.E005", "invalid queue names"),
    ],
)
def test_queues__each_bad_option_is_an_error_with_its_id_and_a_hint(
    queues: dict[str, Any], id_: str, words: str
) -> None:
    ((got, msg, hint),) = messages({"QUEUES": queues})
    assert (got, words in msg) == (id_, True), msg
    assert hint


def test_queues__bad_options_stop_get_settings() -> None:
    bad = {"QUEUES": {"default": {"shards": 100}}}
    with override_settings(JOBS=bad), pytest.raises(ImproperlyConfigured, match="E051"):
        get_settings()


def test_queues__a_mapping_works_with_the_checks_that_read_queues() -> None:
    jobs = {"QUEUES": SHARDED, "EMAIL_QUEUE": "low", "FLOWS_NAMESPACE": "default"}
    assert [m[0] for m in messages(jobs)] == ["django_jobs.E040"]  # flows' queue taken: named


def test_shard_names__the_first_is_the_queue_and_none_can_be_a_queue_name() -> None:
    names = shard_names("default", 8)
    assert names[0] == "default"
    assert len(set(names)) == 8
    assert all(n.startswith("default#") for n in names[1:])
    assert {logical_queue(n) for n in names} == {"default"}
    assert messages({"QUEUES": list(names[1:2])})[0][0] == "django_jobs.E005"


def test_shard_names__more_shards_keep_the_names_of_fewer() -> None:
    assert shard_names("default", 16)[:8] == shard_names("default", 8)
    assert shard_names("hot", 64)[:3] == shard_names("hot", 3)


@pytest.mark.parametrize("count", [4, 8, 16, 32, 64])
@pytest.mark.parametrize("queue", ["default", "hot", "q", "emails.outbound"])
def test_shard_names__a_power_of_two_spreads_evenly_over_three_equal_ranges_of_slots(
    queue: str, count: int
) -> None:
    # What redis-cli --cluster create gives 3 masters: 0-5460, 5461-10922, 10923-16383.
    names = shard_names(queue, count)
    per_master = Counter(min(key_slot(n.encode()) // 5461, 2) for n in names)
    assert max(per_master.values()) - min(per_master.values()) <= 1, per_master


def test_shard_names__each_is_a_slot_of_its_own() -> None:
    names = shard_names("default", 64)
    assert len({key_slot(n.encode()) for n in names}) == 64


def settings_with(queues: Any) -> Any:
    with override_settings(JOBS={"QUEUES": queues}):
        return get_settings()


def test_expand_and_levels__shards_of_one_queue_share_a_level() -> None:
    shards = Shards(settings_with({"critical": {}, "default": {"shards": 3}, "low": {}}))
    names = shard_names("default", 3)
    order = shards.expand(["critical", "default", "low"])
    assert order == ("critical", *names, "low")
    assert shards.levels(order) == (0, 1, 1, 1, 2)


def test_route__tasks_without_keys_take_the_shards_in_turn_a_batch_one_shard() -> None:
    shards = Shards(settings_with(SHARDED))
    one = [EnqueueRequest(str(i), "default", "{}") for i in range(16)]
    singles = [shards.route([request])[0].queue for request in one]
    assert Counter(singles) == Counter(dict.fromkeys(shard_names("default", 8), 2))
    batch = shards.route(one)
    assert len({r.queue for r in batch}) == 1
    assert shards.route([EnqueueRequest("c", "critical", "{}")])[0].queue == "critical"


def test_route__a_keyed_task_goes_to_the_shard_of_its_key() -> None:
    settings = settings_with(SHARDED)
    shards = Shards(settings)
    home = QueueKeys("jobs", "default", shard_names("default", 8))
    seen = set()
    for n in range(40):
        key = home.idempotency("app.Job", f"k{n}")
        (request,) = shards.route([EnqueueRequest("x", "default", "{}", idempotency_key=key)])
        assert key.startswith(f"jobs:{{{request.queue}}}:")  # one slot: no hand-off
        again = shards.route([EnqueueRequest("y", "default", "{}", idempotency_key=key)])
        assert again[0].queue == request.queue
        seen.add(request.queue)
    assert len(seen) == 8


def test_merged__counts_sum_over_shards_and_a_paused_shard_shows() -> None:
    def info(name: str, pending: int, paused: bool = False) -> QueueInfo:
        return QueueInfo(name, paused, 1, pending, 2, 0, 3, 4, 5, 6, canceled=1, parked=2)

    names = shard_names("default", 3)
    infos = [info("critical", 9), *(info(n, 10 * i, i == 2) for i, n in enumerate(names))]
    crit, default = merged(infos)
    assert crit == infos[0]
    assert (default.name, default.pending, default.dead, default.parked) == ("default", 30, 9, 6)
    assert (default.scheduled, default.processed_today, default.paused) == (3, 15, True)
