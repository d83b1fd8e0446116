"""What may reach text redacted: a Redis URL's password (`redact`), a sensitive job's payload
(`REDACTED`).

Here, with the settings, because the settings' own checks show a bad URL (check E003) and they
sit below the broker; `django_jobs.broker.connection` uses it for everything else it says.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

from redis.connection import parse_url

#: What a password becomes in text.
HIDDEN = "***"


def redact(url: str) -> str:
    """Return a Redis URL with its password hidden, in every form redis-py reads one from.

    The password in the user part (`redis://:pw@h`, `redis://user:pw@h`, a bare `redis://pw@h`)
    and the `password` query parameter (`redis://h/0?password=pw`, `unix:///r.sock?password=pw`)
    become ***; the rest is kept so the URL still says where Redis is. A URL that does not parse
    the way redis-py reads it shows only its scheme.
    """
    if not url:
        return url
    scheme = url.partition("://")[0] if "://" in url else ""
    try:
        parts = urlsplit(url)
        # Raises ValueError for what redis-py would not read either (an unknown scheme is fine:
        # a sentinel or cluster form is rebuilt by urllib alone).
        password = None
        if parts.scheme in ("redis", "rediss", "unix"):
            password = parse_url(url).get("password")  # type: ignore[no-untyped-call]
        userinfo, at, host = parts.netloc.rpartition("@")
        netloc = parts.netloc
        if at:
            user, colon, _ = userinfo.partition(":")
            netloc = f"{user}:{HIDDEN}@{host}" if colon else f"{HIDDEN}@{host}"
        query = "&".join(
            f"{piece.partition('=')[0]}={HIDDEN}"
            if unquote_plus(piece.partition("=")[0]).lower() == "password"
            else piece
            for piece in parts.query.split("&")
        )
        rest = parts.path + (f"?{query}" if parts.query else "")
        rest += f"#{parts.fragment}" if parts.fragment else ""
        shown = f"{parts.scheme}://{netloc}{rest}"
    except ValueError:
        return f"{scheme}://{HIDDEN}" if scheme else HIDDEN
    # An "@" left after the host means a password with a "/", "?" or "#" in it, cut where
    # urllib thought the host ended: show nothing rather than a piece of it.
    leaked = "@" in rest.replace(f"={HIDDEN}", "") or (password and password in shown)
    return f"{parts.scheme}://{HIDDEN}" if leaked else shown


#: What a sensitive job's payload, arguments and idempotency key become in the admin, the API,
#: the CLI and the logs (`Job.sensitive`). Decided here, beside the password's.
REDACTED = "[redacted: sensitive job]"


def redacted(value: object, sensitive: bool) -> object:
    """`value` as a reader may show it: REDACTED for a sensitive task's (None stays None)."""
    return REDACTED if sensitive and value is not None else value


def key_matches(key: str | None, query: str, sensitive: bool) -> bool:
    """Whether a search for `query` finds a task by its idempotency key: any part of it, but a
    sensitive task's only whole (searching part by part would spell a redacted key out)."""
    if sensitive and query:
        return key == query
    return query in (key or "")
