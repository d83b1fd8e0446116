"""How the broker talks to Redis: its scripts by SHA, in one round trip, on which connection.

`RedisBroker` (redis.py) builds on this: it knows the keys and the replies; this knows the wire.
Every call here runs inside `unavailable`, so redis-py errors leave as BrokerUnavailable or
BrokerRefused, never as a raw `redis.ResponseError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import redis
from hiredis import pack_command
from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError, ResponseError

from django_jobs.broker import scripts
from django_jobs.broker.connection import NOTHING_CHANGED, unavailable

#: Seconds a signal handler may spend telling Redis to end this process's blocked wait.
UNBLOCK_TIMEOUT = 0.5
#: Scripts that must not run twice for one call: a replayed dequeue would move a second task to
#: active and hand out only one of them, stranding the other until its lease expires.
NOT_REPLAYABLE = frozenset({"dequeue", "ack_dequeue"})


class ScriptCalls:
    """Run the broker's scripts on one Redis client, with our own connection for the hot path."""

    def __init__(self, client: redis.Redis, url: str) -> None:
        self.client = client
        #: The Redis URL with its password hidden: the one form of it that reaches text.
        self.url = url
        self.scripts = scripts.register(client)
        #: The connection `settle` owns, with the pid it was opened in (see `_own_connection`).
        self._own: tuple[int, Any] | None = None  # a redis.connection.Connection
        self._own_id: int | None = None  # its CLIENT ID

    def unavailable(
        self, *, writes: bool = True, outcome: str = NOTHING_CHANGED
    ) -> AbstractContextManager[None]:
        """Turn redis-py errors into BrokerUnavailable or BrokerRefused naming the (redacted)
        URL; `writes=False` for reads (see `connection.unavailable`)."""
        return unavailable(self.url, writes=writes, outcome=outcome)

    def _run(
        self, name: str, keys: Sequence[str], args: Sequence[Any], outcome: str = NOTHING_CHANGED
    ) -> Any:
        with self.unavailable(outcome=outcome):
            return self.scripts[name](keys=keys, args=args)

    def _run_raw(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a script and return its reply as bytes, whatever the stored bytes are."""
        script = self.scripts[name]
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        with self.unavailable():
            if name in NOT_REPLAYABLE:
                # Our own round trip, which never sends it twice (redis-py's retry would).
                (reply,) = self._round_trip([command], own=False, replayable=False)
                if isinstance(reply, NoScriptError):
                    self.client.script_load(script.script)
                    (reply,) = self._round_trip([command], own=False, replayable=False)
                if isinstance(reply, Exception):
                    raise reply
                return reply
            try:
                return self.client.execute_command(*command, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]
            except NoScriptError:
                self.client.script_load(script.script)
                return self.client.execute_command(*command, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]

    def _pipeline(
        self,
        calls: Sequence[tuple[str, list[str], list[Any]]],
        *,
        own: bool = False,
        errors: bool = False,
    ) -> list[Any]:
        """Run script calls in one round trip, replies as bytes; reload forgotten scripts.

        own: on the connection `settle` owns rather than one from the pool. errors: return
        error replies (ResponseError) in their place rather than raise the first.
        """
        commands = []
        replayable = True
        for name, keys, args in calls:  # one loop, no generator: the hot path runs this
            commands.append(("EVALSHA", self.scripts[name].sha, len(keys), *keys, *args))
            replayable = replayable and name not in NOT_REPLAYABLE
        replies = self._round_trip(commands, own=own, replayable=replayable)
        for index, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                # Redis forgot the script (restart, SCRIPT FLUSH): only this call did not run.
                name, keys, args = calls[index]
                replies[index] = self._run_raw(name, keys, args)
            elif isinstance(reply, Exception) and not errors:
                raise reply
        return replies

    def _round_trip(
        self, commands: Sequence[tuple[Any, ...]], *, own: bool, replayable: bool = True
    ) -> list[Any]:
        """Send commands in one write and read their replies: bytes, errors as values.

        What a redis-py pipeline does, without its per-call bookkeeping (the worker's hot path
        runs this once per task). A connection that fails before the commands are sent (a
        restart, an idle timeout) is retried once on a fresh one. One that fails after is
        retried only when the commands are `replayable`: they may or may not have run, and
        every script but a dequeue is safe to run twice. A timeout is not retried: it has spent
        half the caller's time budget (see `connect`), and opening a new connection to a server
        that does not answer would spend more than the rest.
        """
        pool = self.client.connection_pool
        for attempt in (1, 2):
            conn: Any = self._own_connection() if own else pool.get_connection()
            sent = False
            try:
                # hiredis packs as redis-py would with hiredis, minus its per-argument checks.
                packed = b"".join([pack_command(command) for command in commands])
                conn.send_packed_command([packed], check_health=False)
                sent = True
                replies: list[Any] = []
                for _ in commands:
                    try:
                        replies.append(conn.read_response(disable_decoding=True))
                    except ResponseError as exc:
                        replies.append(exc)
                return replies
            except redis.ConnectionError:
                self._drop(conn, own)
                if attempt == 2 or (sent and not replayable):
                    raise
            except BaseException:
                # A timeout, or anything raised between two reads (a JobTimeout from SIGALRM,
                # a KeyboardInterrupt): replies may be left unread, so the connection must
                # never be used again as it is.
                self._drop(conn, own)
                raise
            finally:
                if not own:
                    pool.release(conn)
        raise AssertionError("unreachable")

    def _own_connection(self) -> Any:
        """A connection of this process's own, outside the pool, for `settle` and
        `wait_and_fetch` (a worker child's one thread).

        Taking a connection from the pool and giving it back costs more than the rest of a
        round trip's Python work. A forked child opens its own: a socket is never shared across
        a fork.
        """
        pid = os.getpid()
        if self._own is None or self._own[0] != pid:
            conn: Any = self.client.connection_pool.make_connection()
            conn.register_connect_callback(self._on_own_connect)
            self._own, self._own_id = (pid, conn), None
        return self._own[1]

    def _on_own_connect(self, conn: Any) -> None:
        # Redis numbers each connection (again after a reconnect): `interrupt_wait` needs it.
        try:
            conn.send_command("CLIENT", "ID")
            self._own_id = int(conn.read_response())
        except ResponseError:
            # CLIENT denied (ACL) or renamed: a stopping child then waits out its BLPOP.
            self._own_id = None

    def _drop(self, conn: Any, own: bool) -> None:
        """Close a connection whose state is unknown; it reconnects on its next use."""
        if own:
            self._own_id = None  # an id a new connection may be given by a restarted Redis
        conn.disconnect()

    def interrupt_wait(self) -> None:
        """Make a `wait_and_fetch` blocked in this process return now (safe in a signal handler).

        It unblocks our own connection from a connection of its own: the handler may have
        interrupted this thread inside the pool, holding its lock. If Redis does not answer,
        the wait ends by itself within its timeout.
        """
        if self._own is None or self._own[0] != os.getpid() or self._own_id is None:
            return
        pool = self.client.connection_pool
        short = {"socket_timeout": UNBLOCK_TIMEOUT, "socket_connect_timeout": UNBLOCK_TIMEOUT}
        conn: Any = pool.connection_class(**{**pool.connection_kwargs, **short})
        try:
            conn.send_command("CLIENT", "UNBLOCK", self._own_id)
            conn.read_response()
        except redis.RedisError:
            pass
        finally:
            conn.disconnect()
