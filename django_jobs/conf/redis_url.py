"""The Redis URL forms beside redis-py's own: `redis+sentinel://` and `redis+cluster://`, parsed
here (below the settings' check E003 and the broker, which both read them).

    redis+sentinel://[user:password@]host:26379[,host2:26379...]/<service>[/<db>]
    redis+cluster://[user:password@]host:6379[,host2:6379...][/0]
    rediss+sentinel://...?ssl_ca_certs=/path/ca.crt   rediss+cluster://...?ssl_ca_certs=...

A Sentinel URL's hosts are the sentinels; the service is the name they monitor the primary
under; the user and password are the primary's (the sentinels are asked without them). A Cluster
URL's hosts are some of its nodes, any of which tells the client about the others; a Cluster has
one database, 0; the user and password are the nodes'. The `rediss+` forms connect with TLS
(to the sentinels and the primary alike, or to every node), taking redis-py's own TLS options of
a `rediss://` URL in their query (`TLS_OPTIONS`); the plain forms take no query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
#: Each form and its TLS form (`rediss+...`).
SENTINEL_SCHEMES = (SENTINEL_SCHEME, "rediss+sentinel")
CLUSTER_SCHEMES = (CLUSTER_SCHEME, "rediss+cluster")
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
    #: None for redis+sentinel://; for rediss+sentinel:// the TLS options (may be empty).
    tls: dict[str, Any] | None = None


@dataclass(frozen=True)
class ClusterURL:
    """A parsed `redis+cluster://` URL."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    #: None for redis+cluster://; for rediss+cluster:// the TLS options (may be empty).
    tls: dict[str, Any] | None = None


def _choice(name: str, value: str, choices: dict[str, Any]) -> Any:
    if value.lower() not in choices:
        raise ValueError(f"?{name}={value!r} is not one of {', '.join(choices)}")
    return choices[value.lower()]


#: The query options a `rediss+` URL takes: redis-py's names for its TLS connections (those of
#: a rediss:// URL and of RedisCluster), each read as redis-py takes it.
TLS_OPTIONS: dict[str, Any] = {
    "ssl_ca_certs": None,  # a file of CA certificates (PEM); the system's CAs when not given
    "ssl_ca_path": None,  # a directory of them
    "ssl_certfile": None,  # this client's certificate, for a server that asks for one
    "ssl_keyfile": None,  # its private key
    "ssl_cert_reqs": {"required": "required", "optional": "optional", "none": "none"},
    "ssl_check_hostname": {"true": True, "yes": True, "1": True,
                           "false": False, "no": False, "0": False},
}  # fmt: skip


def _tls(parts: SplitResult) -> dict[str, Any] | None:
    """The TLS options in a URL's query: None for a plain form, which takes no query."""
    if parts.fragment:
        raise ValueError("the URL has a #fragment (percent-encode a '#' in the password)")
    if not parts.scheme.startswith("rediss+"):
        if parts.query:
            tls = f"rediss+{parts.scheme.partition('+')[2]}://"
            raise ValueError(
                f"a {parts.scheme}:// URL takes no ?options: set timeouts in JOBS instead, and "
                f"TLS options (?ssl_ca_certs=...) in a {tls} URL"
            )
        return None
    options: dict[str, Any] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in TLS_OPTIONS:
            raise ValueError(
                f"?{name} is not a TLS option ({', '.join(TLS_OPTIONS)}); set timeouts in JOBS"
            )
        if len(values) > 1 or not values[0]:
            raise ValueError(f"?{name} must be given once, with a value")
        choices = TLS_OPTIONS[name]
        options[name] = values[0] if choices is None else _choice(name, values[0], choices)
    return options


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
    url: str, schemes: tuple[str, str], what: str, port: int
) -> tuple[SplitResult, tuple[tuple[str, int], ...], str | None, str | None]:
    """A URL of several hosts: its parts, its hosts, its username and password."""
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ValueError(f"the scheme is {parts.scheme!r}, not {' or '.join(schemes)}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    return (parts, _hosts(hosts, what, port), *_credentials(userinfo, at))


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse a `redis+sentinel://` (or `rediss+`) URL; a ValueError says what is wrong without
    the password."""
    parts, sentinels, username, password = _split(url, SENTINEL_SCHEMES, "sentinel", SENTINEL_PORT)
    path = [segment for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2:
        raise ValueError("the path must be /<service> or /<service>/<db>")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise ValueError(f"the database {path[1]!r} is not a number")
        db = int(path[1])
    return SentinelURL(sentinels, unquote(path[0]), db, username, password, _tls(parts))


def parse_cluster_url(url: str) -> ClusterURL:
    """Parse a `redis+cluster://` (or `rediss+`) URL; a ValueError says what is wrong without
    the password."""
    parts, nodes, username, password = _split(url, CLUSTER_SCHEMES, "cluster node", CLUSTER_PORT)
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(
            f"the path is {parts.path!r}: a Redis Cluster has one database, 0 (write /0 or "
            f"nothing after the nodes)"
        )
    return ClusterURL(nodes, username, password, _tls(parts))
