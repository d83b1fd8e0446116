"""The Redis URL forms beside redis-py's own: `redis+sentinel://`, parsed here (below the
settings' check E003 and the broker, which both read it).

    redis+sentinel://[user:password@]host:26379[,host2:26379...]/<service>[/<db>]

The hosts are the sentinels; the service is the name they monitor the primary under; the user
and password are the primary's (the sentinels are asked without them).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
#: The Cluster form the settings' check names as not supported yet (issue 20).
CLUSTER_SCHEME = "redis+cluster"
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelURL:
    """A parsed `redis+sentinel://` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse a `redis+sentinel://` URL; a ValueError says what is wrong without the password."""
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise ValueError(f"the scheme is {parts.scheme!r}, not {SENTINEL_SCHEME!r}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        # redis://user:pw@h, redis://:pw@h, and a bare redis://pw@h, as redis-py reads them.
        username = (unquote(user) or None) if colon else None
        password = unquote(secret) if colon else unquote(user)
    sentinels = []
    for piece in hosts.split(","):
        host, colon, port = piece.strip().rpartition(":")
        host = (host if colon else port).strip("[]")
        if not host:
            raise ValueError(f"a sentinel address is empty ({piece!r}): list host:port,...")
        try:
            number = int(port) if colon else SENTINEL_PORT
        except ValueError:
            raise ValueError(f"sentinel {host!r} has port {port!r}, not a number") from None
        sentinels.append((host, number))
    path = [segment for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2:
        raise ValueError("the path must be /<service> or /<service>/<db>")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise ValueError(f"the database {path[1]!r} is not a number")
        db = int(path[1])
    return SentinelURL(tuple(sentinels), unquote(path[0]), db, username, password)
