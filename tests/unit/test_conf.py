from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs.conf import DEFAULTS, get_settings


def test_get_settings__defaults_when_jobs_is_empty() -> None:
    with override_settings(JOBS={}):
        conf = get_settings()
    assert conf.redis_url is None
    assert not conf.enabled
    assert conf.namespace == "jobs"
    assert conf.queues == ("critical", "default", "low")
    assert (conf.max_attempts, conf.timeout, conf.retention) == (5, 300.0, 86400.0)
    assert conf.when_disabled == "inline"


def test_get_settings__follows_override_settings() -> None:
    with override_settings(JOBS={"NAMESPACE": "one"}):
        assert get_settings().namespace == "one"
        with override_settings(JOBS={"NAMESPACE": "two"}):
            assert get_settings().namespace == "two"
        assert get_settings().namespace == "one"


def test_get_settings__durations_accept_timedelta() -> None:
    with override_settings(JOBS={"TIMEOUT": timedelta(minutes=2), "LEASE": 12.5}):
        conf = get_settings()
    assert conf.timeout == 120.0
    assert conf.lease == 12.5


def test_get_settings__empty_redis_url_means_disabled() -> None:
    with override_settings(JOBS={"REDIS_URL": ""}):
        assert not get_settings().enabled


def test_get_settings__invalid_value_raises_with_check_id() -> None:
    with (
        override_settings(JOBS={"TIMEOUT": -1}),
        pytest.raises(ImproperlyConfigured, match=r"django_jobs\.E006.*TIMEOUT"),
    ):
        get_settings()


def test_defaults__every_key_is_a_field() -> None:
    fields = set(get_settings.__wrapped__().__dataclass_fields__)  # type: ignore[attr-defined]
    assert {key.lower() for key in DEFAULTS} == fields - {"queue_shards"}  # read from QUEUES


@pytest.mark.parametrize("rate", ["600/minute", "20/s", "1000/hour", "5/day", None])
def test_api_throttle_rate__rates_and_none_are_valid(rate: str | None) -> None:
    with override_settings(JOBS={"API_THROTTLE_RATE": rate}):
        assert get_settings().api_throttle_rate == rate


@pytest.mark.parametrize("rate", ["600", "0/minute", "ten/minute", "5/fortnight", 600, ""])
def test_api_throttle_rate__anything_else_is_e017(rate: object) -> None:
    expected = r"E017.*API_THROTTLE_RATE.*600/minute"
    with (
        override_settings(JOBS={"API_THROTTLE_RATE": rate}),
        pytest.raises(ImproperlyConfigured, match=expected),
    ):
        get_settings()
