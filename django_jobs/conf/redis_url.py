"""The Redis URL forms beside redis-py's own: `redis+sentinel://` and `redis+cluster://`, parsed
here (below the settings' check E003 and the broker, which both read them).

    redis+sentinel://[user:password@]host:26379[,host2:26379...]/<service>[/<db>]
    redis+cluster://[user:password@]host:6379[,host2:6379...][/0]

A Sentinel URL's hosts are the sentinels; the service is the name they monitor the primary
under; the user and password are the primary's (the sentinels are asked without them). A Cluster
URL's hosts are some of its nodes, any of which tells the client about the others; a Cluster has
one database, 0; the user and password are the nodes'.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
SENTINEL_PORT = 26379
CLUSTER_PORT = 6379


@dataclass(frozen=True)
class SentinelURL:
    """A parsed `redis+sentinel://` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None


@dataclass(frozen=True)
class ClusterURL:
    """A parsed `redis+cluster://` URL."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None


def _credentials(userinfo: str, at: str) -> tuple[str | None, str | None]:
    """(username, password) of a URL's user part, as redis-py reads redis://user:pw@h,
    redis://:pw@h and a bare redis://pw@h."""
    if not at:
        return None, None
    user, colon, secret = userinfo.partition(":")
    if colon:
        return unquote(user) or None, unquote(secret)
    return None, unquote(user)


def _hosts(hosts: str, what: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """The host:port list of a URL's network part; a ValueError names the bad address."""
    found = []
    for piece in hosts.split(","):
        host, colon, port = piece.strip().rpartition(":")
        host = (host if colon else port).strip("[]")
        if not host:
            raise ValueError(f"a {what} address is empty ({piece!r}): list host:port,...")
        try:
            number = int(port) if colon else default_port
        except ValueError:
            raise ValueError(f"{what} {host!r} has port {port!r}, not a number") from None
        found.append((host, number))
    return tuple(found)


def _split(
    url: str, scheme: str, what: str, port: int
) -> tuple[SplitResult, tuple[tuple[str, int], ...], str | None, str | None]:
    """A URL of several hosts: its parts, its hosts, its username and password."""
    parts = urlsplit(url)
    if parts.scheme != scheme:
        raise ValueError(f"the scheme is {parts.scheme!r}, not {scheme!r}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    return (parts, _hosts(hosts, what, port), *_credentials(userinfo, at))


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse a `redis+sentinel://` URL; a ValueError says what is wrong without the password."""
    parts, sentinels, username, password = _split(url, SENTINEL_SCHEME, "sentinel", SENTINEL_PORT)
    path = [segment for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2:
        raise ValueError("the path must be /<service> or /<service>/<db>")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise ValueError(f"the database {path[1]!r} is not a number")
        db = int(path[1])
    return SentinelURL(sentinels, unquote(path[0]), db, username, password)


def parse_cluster_url(url: str) -> ClusterURL:
    """Parse a `redis+cluster://` URL; a ValueError says what is wrong without the password."""
    parts, nodes, username, password = _split(url, CLUSTER_SCHEME, "cluster node", CLUSTER_PORT)
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(
            f"the path is {parts.path!r}: a Redis Cluster has one database, 0 (write /0 or "
            f"nothing after the nodes)"
        )
    if parts.query or parts.fragment:
        raise ValueError("a cluster URL takes no ?options: set timeouts in JOBS instead")
    return ClusterURL(nodes, username, password)
