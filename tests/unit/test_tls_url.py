"""JOBS['REDIS_URL'] = 'rediss+cluster://...' or 'rediss+sentinel://...' (issue 20): TLS, with
redis-py's TLS options in the query; parsed, checked by E003, redacted."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_jobs.checks import check_settings
from django_jobs.conf.redact import redact
from django_jobs.conf.redis_url import parse_cluster_url, parse_sentinel_url


def test_parse_cluster_url__the_tls_form_takes_redis_pys_tls_options() -> None:
    url = (
        "rediss+cluster://:pw@a:7000,b?ssl_ca_certs=/etc/ca%20s.pem&ssl_cert_reqs=Required"
        "&ssl_certfile=/c.pem&ssl_keyfile=/k.pem&ssl_check_hostname=no&ssl_ca_path=/cas"
    )
    parsed = parse_cluster_url(url)
    assert parsed.nodes == (("a", 7000), ("b", 6379))
    assert parsed.password == "pw"
    assert parsed.tls == {
        "ssl_ca_certs": "/etc/ca s.pem", "ssl_cert_reqs": "required", "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem", "ssl_check_hostname": False, "ssl_ca_path": "/cas",
    }  # fmt: skip
    assert parse_cluster_url("rediss+cluster://a:7000/0").tls == {}
    assert parse_cluster_url("redis+cluster://a:7000").tls is None


def test_parse_sentinel_url__the_tls_form_takes_the_same_options() -> None:
    parsed = parse_sentinel_url("rediss+sentinel://a:1,b/jobs/2?ssl_ca_certs=/ca.pem")
    assert (parsed.service, parsed.db, parsed.tls) == ("jobs", 2, {"ssl_ca_certs": "/ca.pem"})
    assert parse_sentinel_url("redis+sentinel://a:1/jobs").tls is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("rediss+cluster://:hunter2@a:1?socket_timeout=1", "?socket_timeout is not a TLS option"),
        ("rediss+cluster://:hunter2@a:1?ssl_cert_reqs=maybe", "not one of required, optional"),
        ("rediss+cluster://:hunter2@a:1?ssl_check_hostname=perhaps", "not one of true"),
        ("rediss+cluster://:hunter2@a:1?ssl_ca_certs=/a&ssl_ca_certs=/b", "given once"),
        ("rediss+cluster://:hunter2@a:1?ssl_ca_certs=", "given once, with a value"),
        ("redis+cluster://:hunter2@a:1?ssl_ca_certs=/a", "in a rediss+cluster:// URL"),
        ("redis+sentinel://:hunter2@a:1/jobs?ssl_ca_certs=/a", "in a rediss+sentinel:// URL"),
        ("rediss+sentinel://:hunter2@a:1/jobs?ssl_keyfile=/k&db=1", "?db is not a TLS option"),
        ("rediss+cluster://:hunter2@a:1/2", "one database, 0"),
    ],
)
def test_check_settings__a_bad_tls_url_is_e003_saying_why_without_the_password(
    url: str, why: str
) -> None:
    with override_settings(JOBS={"REDIS_URL": url}):
        (message,) = check_settings()
    assert message.id == "django_jobs.E003"
    assert why in message.msg
    assert "hunter2" not in message.msg


@pytest.mark.parametrize(
    "url",
    [
        "rediss+cluster://:hunter2@a:7000,b:7001?ssl_ca_certs=/ca.pem",
        "rediss+sentinel://:hunter2@a:26379/jobs/0?ssl_ca_certs=/ca.pem",
    ],
)
def test_check_settings__a_tls_url_is_accepted_and_redacted(url: str) -> None:
    with override_settings(JOBS={"REDIS_URL": url}):
        assert check_settings() == []
    assert redact(url) == url.replace("hunter2", "***")


def test_check_settings__an_unknown_scheme_names_the_tls_forms() -> None:
    with override_settings(JOBS={"REDIS_URL": "redis+clusters://a:7000"}):
        (message,) = check_settings()
    assert "rediss+cluster://" in message.hint
    assert "rediss+sentinel://" in message.hint
