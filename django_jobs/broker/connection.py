"""Connecting to Redis, and saying what went wrong in words a user can act on.

- `redact` is the one way a Redis URL reaches text (the banner, logs, error messages, the
  admin's and the API's 503 pages). It lives in django_jobs.conf.redact, below the settings'
  check E003 that uses it too, and is imported here for the rest.
- `unavailable` turns every redis-py error a broker call can meet into `BrokerUnavailable`, or
  `BrokerRefused` when Redis answered with an error (out of memory, a key of the wrong type in
  our namespace, ACL, a read-only replica): a worker backs off on either, and an enqueue raises a
  named error instead of a raw `redis.ResponseError`.
"""

from __future__ import annotations

import redis
from django.core.exceptions import ImproperlyConfigured
from django.views.decorators.debug import sensitive_variables
from redis.backoff import NoBackoff
from redis.exceptions import NoPermissionError, OutOfMemoryError, ReadOnlyError, ResponseError
from redis.retry import Retry

from django_jobs.conf.redact import redact as redact
from django_jobs.exceptions import BrokerRefused, BrokerUnavailable

#: The error code our scripts reply with when a key has the wrong type, before any write:
#: "WRONGKEY <its type> <the type we keep there> <key>" (the key last: it may hold spaces).
WRONG_KEY = "WRONGKEY"
NOTHING_CHANGED = "nothing was changed"
NOTHING_ENQUEUED = "nothing was enqueued"


@sensitive_variables("url")
def connect(url: str, timeout: float, *, blocking: float = 0.0) -> redis.Redis:
    """Return a client for url whose calls give up after about `timeout` seconds in all.

    One retry, because a timed-out command may or may not have run and every script but a
    dequeue is safe to run twice (the broker never sends a dequeue through this retry: see
    wire.py). `blocking` is the longest BLPOP the client will issue, added to its read timeout.
    A URL that does not parse is an ImproperlyConfigured naming it redacted (redis-py's own
    error would show the password).
    """
    try:
        redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"JOBS['REDIS_URL'] cannot be parsed ({redact(url)}): {str(exc).split(' as ')[0]}. "
            "Percent-encode a password holding '/', '?', '#' or '@' (urllib.parse.quote)."
        ) from None
    half = timeout / 2
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=half,
        socket_timeout=half + blocking,
        retry=Retry(NoBackoff(), 1),
        decode_responses=True,
        # No health checks: a new connection's first one pings with retries of its own, which
        # doubled the time a call took to give up on a frozen Redis. A connection the server
        # closed is caught by the pool before use; one that went silent, by the timeout.
        health_check_interval=0,
    )


def wrong_key(
    key: str, kind: str, expected: str, *, outcome: str = NOTHING_CHANGED
) -> BrokerRefused:
    """The error for a key of ours that holds another type than the one we keep there."""
    return BrokerRefused(
        f"Redis key {key!r} is a {kind}, not the {expected} django-jobs keeps there: it is not "
        f"one of ours (written by hand or by another program). Delete it (nothing else uses our "
        f"namespace), then retry; {outcome}.",
        key=key,
    )


def refused(url: str, exc: ResponseError, *, outcome: str = NOTHING_CHANGED) -> BrokerRefused:
    """The named error for an error reply from Redis at url.

    `outcome` says what became of the call: NOTHING_CHANGED, NOTHING_ENQUEUED. Our scripts check
    their keys before their first write, and Redis refuses a script with a shebang under OOM
    before it runs, so both mean exactly that.
    """
    text = str(exc)
    if text.startswith(f"{WRONG_KEY} "):
        kind, expected, key = text[len(WRONG_KEY) + 1 :].split(" ", 2)
        return wrong_key(key, kind, expected, outcome=outcome)
    if isinstance(exc, OutOfMemoryError):
        return BrokerRefused(
            f"Redis at {url} is out of memory (maxmemory reached, and its policy refuses "
            f"writes): free memory or raise maxmemory; {outcome}."
        )
    if isinstance(exc, ReadOnlyError):
        return BrokerRefused(
            f"Redis at {url} is a read-only replica: point JOBS['REDIS_URL'] at the primary; "
            f"{outcome}."
        )
    if isinstance(exc, NoPermissionError):
        return BrokerRefused(
            f"Redis at {url} denies this user a command django-jobs needs ({text}): allow it in "
            f"the user's ACL (EVALSHA, SCRIPT LOAD, TIME and the data commands on our keys)."
        )
    if "Error compiling script" in text:
        return BrokerRefused(
            f"Redis at {url} cannot compile django-jobs' scripts ({text}): they need Redis 7.0 "
            f"or later (they open with a '#!lua' shebang line). Upgrade Redis; {outcome}."
        )
    if text.startswith("WRONGTYPE"):
        return BrokerRefused(
            f"Redis at {url} refused a command ({text}): a key under our namespace holds a type "
            f"django-jobs did not write. Find it (redis-cli --scan --pattern '<namespace>:*', "
            f"then TYPE) and delete it; nothing else uses our namespace."
        )
    return BrokerRefused(
        f"Redis at {url} refused the call ({text}). Retry later; if it persists, look at the "
        f"Redis server's log and configuration."
    )


class unavailable:  # lower case: used as the function it was, `with unavailable(url):`
    """Turn redis-py errors into BrokerUnavailable (no answer) or BrokerRefused (an error reply).

    writes: whether the call may change something, so that a read's message does not say the
    operation may still have been applied. A class rather than a generator: every broker call
    enters one, the worker's hot path once per task.
    """

    __slots__ = ("outcome", "url", "writes")

    def __init__(self, url: str, *, writes: bool = True, outcome: str = NOTHING_CHANGED) -> None:
        self.url = url
        self.writes = writes
        self.outcome = outcome

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            maybe = "The operation may still have been applied. " if self.writes else ""
            raise BrokerUnavailable(
                f"Redis at {self.url} did not answer ({exc}). {maybe}Check that Redis runs and "
                f"JOBS['REDIS_URL'] points at it, then retry."
            ) from None  # the cause is in the message; its frames hold the password (AUTH args)
        if isinstance(exc, ResponseError):
            raise refused(self.url, exc, outcome=self.outcome) from None
