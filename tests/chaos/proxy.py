"""A TCP proxy the battery puts between a worker and Redis, to partition or slow the network.

`Proxy(upstream_port).start()` listens on a free port of 127.0.0.1 and relays every connection
to the upstream, one thread per direction. Its faults:

- `stall()` / `heal()`: a partition. Bytes read while stalled are held, not relayed (as a
  network dropping packets that TCP will resend), so the worker's commands time out and its
  reconnects hang too; `heal()` relays what was held, late: a late ack reaches Redis then.
- `drop()`: close every connection at once (a reset); the client reconnects through the proxy.
- `delay`: seconds added before each chunk from the client is relayed (a slow link: one
  round trip of a command costs that much more); `return_delay`, the same for each chunk from
  the server (a replica behind it then lags its primary by that much: tests/sentinel.py).
"""

from __future__ import annotations

import socket
import threading
import time

from tests.chaos.processes import free_port

CHUNK = 65536


class Proxy:
    def __init__(
        self, upstream_port: int, *, delay: float = 0.0, return_delay: float = 0.0
    ) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = free_port()
        self.delay = delay
        self.return_delay = return_delay
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.sockets: set[socket.socket] = set()
        #: Connections relayed since the start, and chunks held by a stall.
        self.connections = 0
        self.held = 0
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.thread = threading.Thread(target=self._accept, name="proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Proxy:
        self.thread.start()
        return self

    def stall(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def drop(self) -> int:
        """Close every open connection; return how many sockets were closed."""
        with self.lock:
            sockets, self.sockets = self.sockets, set()
        for sock in sockets:
            _close(sock)
        return len(sockets)

    def stop(self) -> None:
        self.closed.set()
        self.flowing.set()
        _close(self.listener)
        self.drop()
        self.thread.join(timeout=5)

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self.lock:
                self.sockets |= {client, server}
                self.connections += 1
            for source, sink, to_server in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, sink, to_server), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_server: bool) -> None:
        delay = self.delay if to_server else self.return_delay
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                if not self.flowing.is_set():
                    self.held += 1
                    self.flowing.wait()  # the partition: held until healed (or dropped)
                if delay:
                    time.sleep(delay)  # the slow link's added latency, not a wait
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with self.lock:
                    self.sockets.discard(sock)
                _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
