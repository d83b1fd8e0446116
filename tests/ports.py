"""Free ports for the servers tests start, below the kernel's ephemeral range.

A port from bind(("127.0.0.1", 0)) is in the ephemeral range, where the kernel also picks the
local port of every client socket: one of a concurrent test's connections may take it between
the check and the server's bind, or while a test restarts its server on it ("bind: Address
already in use", the server exits). Ports from 10000 up to the range's start are never given
to a client socket (services listen lower: 5432, 6379).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: The lowest port tests pick (below: services of the machine).
LOWEST = 10000


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where /proc does not say)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def bindable(port: int) -> bool:
    """Whether nothing holds port on 127.0.0.1 now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(below: int | None = None) -> int:
    """A port nothing holds now, from LOWEST up to `below` (the ephemeral range's start);
    a port from bind to 0 when the range leaves too little room below it."""
    high = ephemeral_low() if below is None else below
    if high - LOWEST < 1000:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    while True:
        port = random.randrange(LOWEST, high)
        if bindable(port):
            return port
