"""The plain enqueue's fast path: a job's defaults resolved once per job class and settings,
yet following every change of JOBS, of a class attribute and of a default_queue hook; ids."""

import re
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import Any, ClassVar

import pytest
from django.db import transaction

from django_jobs import Job, UnknownQueue
from django_jobs.client import NO_OPTIONS, Options, resolve
from django_jobs.conf import get_settings
from django_jobs.message import decode
from tests.conftest import RedisNamespace


@dataclass(frozen=True)
class Number:
    n: int


class Plain(Job[Number]):
    name = "tests.defaults.Plain"

    def run(self, payload: Number) -> None:
        pass


#: The queue the Hooked job's default_queue hook answers, changed by the tests.
hooked = {"queue": "default"}


class Hooked(Job[Number]):
    name = "tests.defaults.Hooked"

    @classmethod
    def default_queue(cls) -> str:
        return hooked["queue"]

    def run(self, payload: Number) -> None:
        pass


def _message(ns: RedisNamespace, queue: str, task_id: str) -> Any:
    record = ns.client.hgetall(f"{ns.namespace}:{{{queue}}}:t:{task_id}")
    return decode(record[b"msg"], task_id, queue)


def _limits(ns: RedisNamespace, handle: Any) -> tuple[Any, ...]:
    m = _message(ns, handle.queue, handle.id)
    return (m.queue, m.max_attempts, m.timeout, m.retention)


def test_options_of__none_given_is_no_options_and_any_given_is_its_own() -> None:
    assert Options.of() is NO_OPTIONS
    assert Options.of(timeout=0) == Options(timeout=0)
    assert Options.of(timeout=0) is not NO_OPTIONS
    assert Options.of(None, None, None, None, None, timedelta(0)).retention == timedelta(0)


def test_resolve__no_options_is_resolved_once_per_job_and_settings(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    first = resolve(Plain, NO_OPTIONS, get_settings())
    assert resolve(Plain, NO_OPTIONS, get_settings()) is first
    assert resolve(Plain, Options(), get_settings()) == first  # an equal Options: not cached
    settings.JOBS = {**settings.JOBS, "TIMEOUT": 12}
    again = resolve(Plain, NO_OPTIONS, get_settings())
    assert again is not first
    assert again.timeout == 12.0


def test_enqueue__defaults_follow_a_settings_change(
    redis_ns: RedisNamespace, settings: Any
) -> None:
    # Given a first enqueue under the test's JOBS
    assert _limits(redis_ns, Plain.enqueue(Number(1))) == ("default", 5, 300.0, 86400.0)

    # When JOBS changes (override_settings sends setting_changed)
    settings.JOBS = {**settings.JOBS, "MAX_ATTEMPTS": 2, "TIMEOUT": 9, "RETENTION": 60}

    # Then the next plain enqueue resolves the new defaults
    assert _limits(redis_ns, Plain.enqueue(Number(2))) == ("default", 2, 9.0, 60.0)
    many = Plain.enqueue_many([Number(3)])
    assert _limits(redis_ns, many[0]) == ("default", 2, 9.0, 60.0)


def test_enqueue__defaults_follow_a_changed_class_attribute(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    Plain.enqueue(Number(1))
    monkeypatch.setattr(Plain, "queue", "low")
    monkeypatch.setattr(Plain, "timeout", timedelta(seconds=7))
    monkeypatch.setattr(Plain, "max_attempts", 3)
    monkeypatch.setattr(Plain, "retention", 0)

    assert _limits(redis_ns, Plain.enqueue(Number(2))) == ("low", 3, 7.0, 0.0)


def test_enqueue__a_default_queue_hook_is_asked_at_every_enqueue(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(hooked, "queue", "default")
    assert Hooked.enqueue(Number(1)).queue == "default"
    monkeypatch.setitem(hooked, "queue", "critical")
    assert Hooked.enqueue(Number(2)).queue == "critical"
    monkeypatch.setitem(hooked, "queue", "nowhere")
    for _ in range(2):  # refused each time: an error is never kept
        with pytest.raises(UnknownQueue):
            Hooked.enqueue(Number(3))


class RoundRobin(Job[Number]):
    """A hook that answers differently at each call, as a spreading hook may."""

    name = "tests.defaults.RoundRobin"
    answers: ClassVar[list[str]] = []

    @classmethod
    def default_queue(cls) -> str:
        queue = ("default", "critical")[len(cls.answers) % 2]
        cls.answers.append(queue)
        return queue

    def run(self, payload: Number) -> None:
        pass


def test_enqueue__each_task_goes_where_its_hook_answered(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RoundRobin, "answers", [])
    queues = [RoundRobin.enqueue(Number(n)).queue for n in range(6)]
    # Asked once per enqueue, and each task is on the queue that one answer named
    assert RoundRobin.answers == queues == ["default", "critical"] * 3


def test_enqueue__a_class_default_changed_to_another_type_is_checked_again(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Plain, "max_attempts", 3)
    Plain.enqueue(Number(1))
    monkeypatch.setattr(Plain, "max_attempts", 3.0)  # equal to 3, not a whole number
    with pytest.raises(ValueError, match="whole number"):
        Plain.enqueue(Number(2))


@pytest.mark.django_db(transaction=True)
def test_enqueue_many__of_nothing_is_nothing_also_at_a_commit(redis_ns: RedisNamespace) -> None:
    assert Plain.enqueue_many([]) == []
    with transaction.atomic():
        assert Plain.enqueue_many([], on_commit=True) == []
    assert redis_ns.client.keys(f"{redis_ns.namespace}:*") == []


def test_enqueue__an_unhashable_class_default_is_refused_as_before(
    redis_ns: RedisNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Plain, "timeout", [5])
    with pytest.raises(TypeError, match="list"):
        Plain.enqueue(Number(1))


def test_enqueue__ids_are_32_lowercase_hex_digits_and_all_different(
    redis_ns: RedisNamespace,
) -> None:
    ids = [h.id for h in [Plain.enqueue(Number(n)) for n in range(50)]]
    ids += [h.id for h in Plain.enqueue_many([Number(n) for n in range(50)])]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
    assert len(set(ids)) == 100


#: The most Python functions of django_jobs outside the broker (broker/, keys.py) and
#: message.py that one plain enqueue runs, its defaults already resolved: the job, the client,
#: the backend, conf. It was 18 before the fast path (resolve ran _pick x2, to_seconds x4).
MOST_CLIENT_CALLS = 13
OUTSIDE = ("/django_jobs/broker/", "/django_jobs/keys.py", "/django_jobs/message.py")
#: Comprehensions: a call of their own before Python 3.12 (PEP 709), inlined since.
INLINED = ("<listcomp>", "<dictcomp>", "<setcomp>")


def test_enqueue__a_plain_enqueue_runs_few_functions_of_the_client(
    redis_ns: RedisNamespace,
) -> None:
    Plain.enqueue(Number(0))  # the broker made, the defaults resolved
    calls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, arg: object) -> None:
        path = frame.f_code.co_filename.replace("\\", "/")
        name = frame.f_code.co_name
        if event != "call" or name in INLINED or "/django_jobs/" not in path:
            return
        if not any(part in path for part in OUTSIDE):
            calls[f"{path.rsplit('/django_jobs/', 1)[1]}:{name}"] += 1

    sys.setprofile(count)
    try:
        Plain.enqueue(Number(1))
    finally:
        sys.setprofile(None)
    assert sum(calls.values()) <= MOST_CLIENT_CALLS, calls
