"""Passwords never reach text: `redact` in every URL form redis-py reads, and Django's debug
page (issue 12, item 5)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from django.test import RequestFactory
from django.views.debug import (
    ExceptionReporter,
    SafeExceptionReporterFilter,
    get_default_exception_reporter_filter,
)

from django_jobs.apps import hide_redis_urls
from django_jobs.broker.connection import redact, unavailable
from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from tests.conftest import RedisServer, free_port

SECRET = "s3cr3t"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cr3t@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:s3cr3t@h", "redis://user:***@h"),
        ("redis://h:6379/0?password=s3cr3t", "redis://h:6379/0?password=***"),
        ("redis://h/0?db=1&Password=s3cr3t&x=1", "redis://h/0?db=1&Password=***&x=1"),
        ("rediss://user:s3cr3t@h:6380/1", "rediss://user:***@h:6380/1"),
        (
            "rediss://h/0?ssl_cert_reqs=none&password=s3cr3t",
            "rediss://h/0?ssl_cert_reqs=none&password=***",
        ),
        ("unix:///tmp/r.sock?password=s3cr3t&db=0", "unix:///tmp/r.sock?password=***&db=0"),
        ("unix://:s3cr3t@/tmp/r.sock?db=0", "unix://:***@/tmp/r.sock?db=0"),
        ("redis://:s3@cr3t@h/0", "redis://:***@h/0"),
        ("redis://user:s3:cr3t@h/0", "redis://user:***@h/0"),
        ("redis://:s3%40cr3t@h/0", "redis://:***@h/0"),
        ("redis://s3cr3t@h/0", "redis://***@h/0"),
        ("redis://h/0?password=s3%40cr3t", "redis://h/0?password=***"),
        (
            "redis+sentinel://:s3cr3t@h1:26379,h2:26379/mymaster/0",
            "redis+sentinel://:***@h1:26379,h2:26379/mymaster/0",
        ),
        ("redis://:s3/cr3t@h/0", "redis://***"),
        ("redis://:s3#cr3t@h/0", "redis://***"),
        ("redis://:s3?cr3t@h/0", "redis://***"),
        ("redis://[::1:s3cr3t@h", "redis://***"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("", ""),
    ],
)
def test_redact__hides_the_password_in_every_form(url: str, shown: str) -> None:
    assert redact(url) == shown
    for piece in ("s3cr3t", "s3@cr3t", "cr3t"):
        assert piece not in redact(url)


def test_redact__broker_messages_carry_the_redacted_url(settings: Any) -> None:
    settings.JOBS = {
        "REDIS_URL": f"redis://user:{SECRET}@127.0.0.1:{free_port()}/0?password={SECRET}",
        "ENQUEUE_TIMEOUT": 0.5,
    }
    broker = get_broker()

    with pytest.raises(BrokerUnavailable) as caught:
        broker.forward("default")

    assert SECRET not in str(caught.value)
    assert "user:***@127.0.0.1" in str(caught.value)
    assert SECRET not in broker.url


def test_unavailable__a_read_does_not_say_it_may_have_been_applied() -> None:
    import redis

    for writes, said in ((True, True), (False, False)):
        with pytest.raises(BrokerUnavailable) as caught, unavailable("redis://h", writes=writes):
            raise redis.ConnectionError("refused")
        assert ("may still have been applied" in str(caught.value)) is said


# -- Django's debug page -------------------------------------------------------------------------


def test_debug_page__hides_jobs_redis_url_by_default(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": f"redis://:{SECRET}@h:6379/0", "NAMESPACE": "n"}

    safe = get_default_exception_reporter_filter().get_safe_settings()

    assert SECRET not in str(safe["JOBS"])
    assert safe["JOBS"]["NAMESPACE"] == "n"


def test_debug_page__technical_500_shows_no_password(settings: Any) -> None:
    settings.JOBS = {"REDIS_URL": f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"}
    settings.DEBUG = True
    request = RequestFactory().get("/")
    try:
        get_broker().client.ping()
    except Exception:
        html = ExceptionReporter(request, *sys.exc_info()).get_traceback_html()

    assert SECRET not in html


class ProjectFilter(SafeExceptionReporterFilter):
    """A project's own filter with a pattern of its own."""

    hidden_settings = re.compile("ONCALL")


def test_debug_page__a_project_filter_keeps_working(settings: Any) -> None:
    settings.DEFAULT_EXCEPTION_REPORTER_FILTER = f"{__name__}.ProjectFilter"
    settings.ONCALL = "555-0100"
    hide_redis_urls()  # again: idempotent, and leaves a filter's own pattern alone
    get_default_exception_reporter_filter.cache_clear()  # Django caches the filter
    try:
        project = get_default_exception_reporter_filter()
        safe = project.get_safe_settings()
    finally:
        get_default_exception_reporter_filter.cache_clear()

    assert isinstance(project, ProjectFilter)
    assert safe["ONCALL"] != "555-0100"
    assert SafeExceptionReporterFilter.hidden_settings.pattern.count("REDIS_URL") == 1


def test_debug_page__frames_holding_the_settings_show_no_password(settings: Any) -> None:
    # A view's enqueue that raises (here an unknown queue) puts frames on the debug page whose
    # locals hold the resolved JobsSettings.
    from django_jobs.client import Options, resolve
    from django_jobs.conf import get_settings
    from django_jobs.exceptions import UnknownQueue
    from tests.integration.test_broker import NoteJob

    settings.JOBS = {"REDIS_URL": f"redis://:{SECRET}@h:6379/0"}
    try:
        resolve(NoteJob, Options(queue="nope"), get_settings())
    except UnknownQueue:
        html = ExceptionReporter(RequestFactory().get("/"), *sys.exc_info()).get_traceback_html()

    assert "JobsSettings" in html
    assert SECRET not in html


@pytest.mark.private_redis
def test_debug_page__a_refused_password_leaves_no_frame_holding_it(
    settings: Any, private_redis: RedisServer
) -> None:
    # A wrong password fails in redis-py's AUTH, whose frames hold the password: the named
    # error must not chain them onto the debug page.
    from tests.integration.test_broker import Note, NoteJob

    private_redis.client().config_set("requirepass", "the-right-one")
    settings.JOBS = {"REDIS_URL": f"redis://:{SECRET}@127.0.0.1:{private_redis.port}/0"}
    try:
        NoteJob.enqueue(Note("hello"))
    except BrokerUnavailable:
        info = sys.exc_info()
    else:
        pytest.fail("an enqueue with a wrong password did not raise BrokerUnavailable")
    html = ExceptionReporter(RequestFactory().get("/"), *info).get_traceback_html()

    assert SECRET not in html


@pytest.mark.parametrize("password", ["s3cr3t/x", "s3cr3t?x", "s3cr3t#x"])
def test_redis_url__one_that_does_not_parse_is_named_without_its_password(
    settings: Any, password: str
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from django_jobs.broker.factory import connect
    from django_jobs.conf import settings_errors

    url = f"redis://:{password}@127.0.0.1:6379/0"
    settings.JOBS = {"REDIS_URL": url}

    errors = settings_errors()
    with pytest.raises(ImproperlyConfigured) as caught:
        connect(url, 1.0)

    assert [e.id for e in errors] == ["django_jobs.E003"]
    assert SECRET not in errors[0].msg + str(errors[0].hint)
    assert "Percent-encode" in str(errors[0].hint)
    assert SECRET not in str(caught.value)
