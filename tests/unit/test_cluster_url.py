"""JOBS['REDIS_URL'] = 'redis+cluster://...' (issue 20): parsed, checked by E003, redacted."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf.redact import redact
from django_jobs.conf.redis_url import ClusterURL, parse_cluster_url


def test_parse_cluster_url__nodes_and_credentials() -> None:
    assert parse_cluster_url("redis+cluster://u:p%40w@a:7000,b") == ClusterURL(
        (("a", 7000), ("b", 6379)), "u", "p@w"
    )
    assert parse_cluster_url("redis+cluster://:pw@a:1/0").password == "pw"
    assert parse_cluster_url("redis+cluster://[::1]:7000").nodes == (("::1", 7000),)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+cluster://:hunter2@a:x", "not a number"),
        ("redis+cluster://:hunter2@a:1/3", "one database, 0"),
        ("redis+cluster://:hunter2@,a:1", "address is empty"),
        ("redis+cluster://:hunter2@a:1?socket_timeout=1", "no ?options"),
    ],
)
def test_check_settings__bad_cluster_url_is_e003_saying_why_without_the_password(
    url: str, why: str
) -> None:
    with override_settings(JOBS={"REDIS_URL": url}):
        (message,) = check_settings()
    assert message.id == "django_jobs.E003"
    assert why in message.msg
    assert "hunter2" not in message.msg


def test_check_settings__cluster_url_is_accepted_and_redacted() -> None:
    url = "redis+cluster://:hunter2@a:7000,b:7001"
    with override_settings(JOBS={"REDIS_URL": url}):
        assert check_settings() == []
    assert redact(url) == "redis+cluster://:***@a:7000,b:7001"


def test_check_settings__an_unknown_scheme_names_the_cluster_form() -> None:
    with override_settings(JOBS={"REDIS_URL": "cluster://a:7000"}):
        (message,) = check_settings()
    assert message.id == "django_jobs.E003"
    assert "redis+cluster://" in message.hint
