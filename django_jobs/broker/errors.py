"""What went wrong with a Redis call, in words a user can act on (connection.py's calls).

- `unavailable`, the guard every broker call runs in (connection.py), turns every redis-py error
  a call can meet into `BrokerUnavailable` (no answer) or `BrokerRefused` (Redis answered with an
  error: out of memory, a key of the wrong type in our namespace, ACL, a read-only replica): a
  worker backs off on either, and an enqueue raises a named error, not a raw ResponseError.
- `refused` and `wrong_key` are the BrokerRefused of one error reply, naming what to do.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

from django_jobs.exceptions import BrokerRefused

#: The error code our scripts reply with when a key has the wrong type, before any write:
#: "WRONGKEY <its type> <the type we keep there> <key>" (the key last: it may hold spaces).
WRONG_KEY = "WRONGKEY"
NOTHING_CHANGED = "nothing was changed"
NOTHING_ENQUEUED = "nothing was enqueued"
#: What an enqueue whose reply was lost says (it is never sent twice: connection._round_trip).
MAYBE_ENQUEUED = (
    "The tasks may still have been enqueued: a retry could enqueue them twice, unless each has "
    "an idempotency key (Job.enqueue(idempotency_key=...)). "
)

#: Redis Cluster's answers while a slot moves or a failover runs, left after a call's time
#: budget (see cluster.ClusterWire): the call did not run, and may be tried again.
MOVING = (TryAgainError, ClusterDownError, AskError)


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
    if isinstance(exc, MOVING):  # left after the call's budget (cluster.ClusterWire)
        return BrokerRefused(
            f"Redis Cluster at {url} is moving a slot or failing over ({text}): {outcome}. "
            f"Retry in a moment.",
            transient=True,
        )
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


def partly_enqueued(url: str, failed: Sequence[ResponseError], total: int) -> BrokerRefused:
    """The error of an enqueue of total tasks, one script call each, of which failed were
    refused (the others may have gone in): the first refusal's, saying how many went in."""
    done = total - len(failed)
    outcome = NOTHING_ENQUEUED
    if done:
        outcome = f"{done} of these {total} tasks were enqueued, the rest were not"
    return refused(url, failed[0], outcome=outcome)
