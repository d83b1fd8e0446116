"""JOBS['REDIS_URL'] = 'redis+sentinel://...' (issue 20): parsed, checked by E003, redacted."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf.redact import redact
from django_jobs.conf.redis_url import SentinelURL, parse_sentinel_url


def test_parse_sentinel_url__hosts_service_db_and_credentials() -> None:
    assert parse_sentinel_url("redis+sentinel://u:p%40w@a:1,b/mymaster/3") == SentinelURL(
        (("a", 1), ("b", 26379)), "mymaster", 3, "u", "p@w"
    )
    assert parse_sentinel_url("redis+sentinel://:pw@a:1/m").password == "pw"
    assert parse_sentinel_url("redis+sentinel://a:1/m").db == 0


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://:hunter2@a:1",  # no service
        "redis+sentinel://:hunter2@a:x/m",  # port not a number
        "redis+sentinel://:hunter2@a:1/m/zero",  # db not a number
        "redis+sentinel://:hunter2@,a:1/m",  # an empty address
    ],
)
def test_check_settings__bad_sentinel_url_is_e003_without_the_password(url: str) -> None:
    with override_settings(JOBS={"REDIS_URL": url}):
        (message,) = check_settings()
    assert message.id == "django_jobs.E003"
    assert "hunter2" not in message.msg


def test_check_settings__sentinel_url_is_accepted_and_redacted() -> None:
    url = "redis+sentinel://:hunter2@a:26379,b:26379/mymaster/0"
    with override_settings(JOBS={"REDIS_URL": url}):
        assert check_settings() == []
    assert redact(url) == "redis+sentinel://:***@a:26379,b:26379/mymaster/0"
