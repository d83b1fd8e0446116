"""Talking to Redis: the wire, and what went wrong in words a user can act on. `RedisBroker`
(redis.py) builds on `ScriptCalls`: it knows the replies; this knows the connection. The client
itself is made by `factory.connect` (timeouts, the one retry of the pool's calls).

- `ScriptCalls` runs the broker's scripts by SHA in one round trip, on a connection of the
  worker child's own for its hot path (`settle`, `wait_and_fetch`), which a signal handler can
  unblock (`interrupt_wait`), on a spare one for other calls that may run twice (an enqueue's:
  `_spare`); it also holds the keys of each queue. On a Redis Cluster (`redis+cluster://`)
  the client is a RedisCluster and the scripts travel on `cluster.ClusterWire`.
- `redact` (django_jobs.conf.redact, below the settings' check E003 that uses it too) is the one
  way a Redis URL reaches text: the banner, logs, error messages, the admin's and API's 503s.
- `unavailable` turns every redis-py error a broker call can meet into `BrokerUnavailable` or
  `BrokerRefused` (the messages: errors.py): every call of `ScriptCalls` runs inside it, so it
  lives here, on a task's path, and errors.py runs only when a call failed.
"""

from __future__ import annotations

import os
import select
import selectors
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import redis
from hiredis import pack_command
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from django_jobs.broker import scripts
from django_jobs.broker.cluster import ClusterWire
from django_jobs.broker.errors import MAYBE_ENQUEUED, MOVING
from django_jobs.broker.errors import NOTHING_CHANGED as NOTHING_CHANGED
from django_jobs.broker.errors import NOTHING_ENQUEUED as NOTHING_ENQUEUED
from django_jobs.broker.errors import refused as refused
from django_jobs.broker.errors import wrong_key as wrong_key
from django_jobs.broker.shards import shards_for
from django_jobs.conf import JobsSettings
from django_jobs.conf.redact import redact as redact
from django_jobs.exceptions import BrokerUnavailable
from django_jobs.keys import QueueKeys


def decoded(reply: Any) -> Any:
    """A script's reply as redis-py gives it with decode_responses: every string as text."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, list):
        return [decoded(item) for item in reply]
    return reply


def closed_by_server(conn: Any) -> bool:
    """Whether an idle connection has something to read: then the server closed it (a restart,
    an idle timeout, CLIENT KILL), seen by a poll kept with its socket (0.5 µs; select 1.1)."""
    sock = conn._sock
    if sock is None:
        return False  # not connected: its send connects it
    polled = getattr(conn, "_jobs_poll", None)
    if polled is None or polled[0] is not sock:  # a new socket (reconnected)
        if not hasattr(select, "poll"):  # Windows has none (gevent's patched select has one)
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_READ)
                return bool(selector.select(0))
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        polled = conn._jobs_poll = (sock, poller)
    return bool(polled[1].poll(0))


class unavailable:  # lower case: used as the function it was, `with unavailable(url):`
    """Turn redis-py errors into BrokerUnavailable (no answer; on a Cluster also a slot on the
    move or a failover) or BrokerRefused (an error reply, named by `refused`; an enqueue's slot
    on the move too, as a batch's). `writes`: whether the call may change something (a read's
    message does not say it may have been applied). A class: the hot path enters one per task.
    """

    __slots__ = ("outcome", "url", "writes")

    def __init__(self, url: str, *, writes: bool = True, outcome: str = NOTHING_CHANGED) -> None:
        self.url = url
        self.writes = writes
        self.outcome = outcome

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, MOVING) and self.outcome == NOTHING_ENQUEUED:
            raise refused(self.url, exc, outcome=self.outcome) from None  # as a batch's (redis.py)
        if isinstance(exc, MOVING):
            raise BrokerUnavailable(
                f"Redis Cluster at {self.url} is moving a slot or failing over ({exc}): that "
                f"call did not run. Retry in a moment."
            ) from None
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            maybe = "The operation may still have been applied. " if self.writes else ""
            if self.outcome == NOTHING_ENQUEUED:  # sent once, never again (_round_trip)
                maybe = MAYBE_ENQUEUED
            raise BrokerUnavailable(
                f"Redis at {self.url} did not answer ({exc}). {maybe}Check that Redis runs and "
                f"JOBS['REDIS_URL'] points at it, then retry."
            ) from None  # the cause is in the message; its frames hold the password (AUTH args)
        if isinstance(exc, ResponseError):
            raise refused(self.url, exc, outcome=self.outcome) from None


#: Seconds a spare connection may sit idle and still carry a call as it is: past that it is
#: reopened first. A load balancer or NAT between us and Redis may forget an idle connection
#: without a word (closed_by_server cannot see that), and an enqueue is never sent twice.
SPARE_IDLE = 30.0
#: Seconds a signal handler may spend telling Redis to end this process's blocked wait.
UNBLOCK_TIMEOUT = 0.5
#: Scripts that must not run twice for one call: a replayed dequeue would move a second task to
#: active and hand out only one of them, stranding the other until its lease expires.
NOT_REPLAYABLE = frozenset({"dequeue", "ack_dequeue"})
#: Scripts never sent again once sent: their guard, the task record, is gone after an ack with a
#: retention of 0. On a Cluster's wire as on one server's spares (where nothing sent is resent).
SENT_ONCE = frozenset({"enqueue", "enqueue_many"})


class ScriptCalls:
    """Run the broker's scripts on one Redis client, with our own connection for the hot path."""

    def __init__(self, client: redis.Redis, settings: JobsSettings) -> None:
        self.client = client
        self.settings = settings
        #: The Redis URL with its password hidden: the one form of it that reaches text.
        self.url = redact(settings.redis_url or "")
        self._keys: dict[str, QueueKeys] = {}
        #: The sharded queues' shards, and where an enqueue puts a task (broker/shards.py).
        self.shards = shards_for(settings)
        self.scripts = scripts.register(client)
        #: On a Redis Cluster, the wire script calls travel on (see cluster.py); else None.
        self.wire: ClusterWire | None = None
        if isinstance(client, RedisCluster):
            fragile = [self.scripts[name].sha for name in NOT_REPLAYABLE | SENT_ONCE]
            self.wire = ClusterWire(client, settings.enqueue_timeout, fragile)
        #: The connection `settle` owns, with the pid it was opened in (see `_own_connection`).
        self._own: tuple[int, Any] | None = None  # a redis.connection.Connection
        self._own_id: int | None = None  # its CLIENT ID
        #: The spare connections of replayable calls, with the pid they belong to (`_spare`).
        self._spares: tuple[int, list[Any]] = (os.getpid(), [])
        #: The most spares kept: as many as the pool's max_connections (none on a Cluster).
        pool = getattr(client, "connection_pool", None)
        self._most: int = getattr(pool, "max_connections", None) or 2**31

    def keys(self, queue: str) -> QueueKeys:
        """The keys of one queue."""
        keys = self._keys.get(queue)
        if keys is None:
            shards = self.shards.names.get(queue, ())  # an idempotency key's home among them
            keys = self._keys[queue] = QueueKeys(self.settings.namespace, queue, shards)
        return keys

    def _command(self, call: tuple[str, list[str], list[Any]]) -> tuple[Any, ...]:
        """The EVALSHA command of a script call (name, keys, args), for `_round_trip`."""
        name, keys, args = call
        return ("EVALSHA", self.scripts[name].sha, len(keys), *keys, *args)

    def unavailable(
        self, *, writes: bool = True, outcome: str = NOTHING_CHANGED
    ) -> AbstractContextManager[None]:
        """Turn redis-py errors into BrokerUnavailable or BrokerRefused naming the (redacted)
        URL; `writes=False` for reads (see `connection.unavailable`)."""
        return unavailable(self.url, writes=writes, outcome=outcome)

    def _run(
        self, name: str, keys: Sequence[str], args: Sequence[Any], outcome: str = NOTHING_CHANGED
    ) -> Any:
        if self.wire is not None:
            return decoded(self._run_raw(name, keys, args, outcome=outcome))
        with self.unavailable(outcome=outcome):
            return self.scripts[name](keys=keys, args=args)

    def _run_raw(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        *,
        writes: bool = True,
        outcome: str = NOTHING_CHANGED,
    ) -> Any:
        """Run a script and return its reply as bytes, whatever the stored bytes are
        (`writes=False` for a read-only script: see `unavailable`)."""
        with self.unavailable(writes=writes, outcome=outcome):
            if name in NOT_REPLAYABLE or name in SENT_ONCE or self.wire is not None:
                return self._call(name, keys, args, replayable=name not in NOT_REPLAYABLE)
            script = self.scripts[name]
            command = ("EVALSHA", script.sha, len(keys), *keys, *args)
            try:
                return self.client.execute_command(*command, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]
            except NoScriptError:
                self.client.script_load(script.script)
                return self.client.execute_command(*command, **{NEVER_DECODE: True})  # type: ignore[no-untyped-call]

    def _call(
        self, name: str, keys: Sequence[str], args: Sequence[Any], *, replayable: bool = True
    ) -> Any:
        """One script call in a round trip of its own (ours: redis-py's retry would send a
        dequeue twice; on a Cluster the wire's, which follows redirections): its reply as
        bytes, its error raised; a script Redis forgot is loaded and the call sent again."""
        script = self.scripts[name]
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        (reply,) = self._round_trip([command], own=False, replayable=replayable)
        if isinstance(reply, NoScriptError):
            self.client.script_load(script.script)
            (reply,) = self._round_trip([command], own=False, replayable=replayable)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _pipeline(
        self,
        calls: Sequence[tuple[str, list[str], list[Any]]],
        *,
        own: bool = False,
        errors: bool = False,
    ) -> list[Any]:
        """Run script calls in one round trip, replies as bytes; reload forgotten scripts.
        own: on the connection `settle` owns (see `_round_trip`). errors: return error replies
        (ResponseError) in their place rather than raise the first."""
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

    def _send(
        self, commands: list[tuple[Any, ...]], names: list[str | None], *, own: bool
    ) -> list[Any]:
        """Send a fetch's commands (a dequeue among them: never replayed) in one round trip,
        replies as bytes, errors as values; run again those of the script calls Redis had
        forgotten the script of (names: each command's script, None for a plain command)."""
        replies = self._round_trip(commands, own=own, replayable=False)
        for reply in replies:  # a loop, not a generator: the hot path
            if isinstance(reply, NoScriptError):
                return self._reload(commands, names, replies)
        return replies

    def _reload(
        self, commands: list[tuple[Any, ...]], names: list[str | None], replies: list[Any]
    ) -> list[Any]:
        """Run again, one by one, the script calls Redis had forgotten the script of (a
        restart, SCRIPT FLUSH: they did not run)."""
        for index, reply in enumerate(replies):
            name = names[index]
            if isinstance(reply, NoScriptError) and name is not None:
                self.client.script_load(self.scripts[name].script)
                (replies[index],) = self._round_trip([commands[index]], own=False, replayable=False)
        return replies

    def _round_trip(
        self, commands: Sequence[tuple[Any, ...]], *, own: bool, replayable: bool = True
    ) -> list[Any]:
        """Send commands in one write and read their replies: bytes, errors as values. A
        redis-py pipeline without its bookkeeping, on the connection `settle` owns (`own`), on a
        spare for other calls that may run twice (`_spare`), else on one of the pool's. A spare
        the server closed is reopened before the send; a connection that fails is reopened and
        the commands sent again, once, if they were not sent yet, or on `settle`'s connection if
        `replayable`. Nothing sent on a spare is sent again: an enqueue's guard is its record,
        which an ack with a retention of 0 deletes, so a resend could make a second task. A
        timeout is not retried: it spent half the caller's budget (`connect`), and a new
        connection to a server that does not answer would spend more."""
        if self.wire is not None:
            return self.wire.round_trip(commands, own=own, replayable=replayable)
        spares = None
        if own:
            conn: Any = self._own_connection()
        elif replayable:
            spares, conn = self._spare()
            if closed_by_server(conn) or time.monotonic() - conn._jobs_idle_since > SPARE_IDLE:
                conn.disconnect()  # reopened by its send
        else:
            conn = self.client.connection_pool.get_connection()
        try:
            for attempt in (1, 2):
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
                    self._drop(conn, own)  # it reconnects on its next send
                    if attempt == 2 or (sent and (spares is not None or not replayable)):
                        raise
                except BaseException:
                    # A timeout, or anything raised between two reads (a JobTimeout from
                    # SIGALRM, a KeyboardInterrupt): replies may be left unread, so the
                    # connection must never be used again as it is.
                    self._drop(conn, own)
                    raise
            raise AssertionError("unreachable")
        finally:
            if spares is not None and len(spares) < self._most:
                conn._jobs_idle_since = time.monotonic()
                spares.append(conn)
            elif spares is not None:
                conn.disconnect()
            elif not own:
                self.client.connection_pool.release(conn)

    def _spare(self) -> tuple[list[Any], Any]:
        """A connection outside the pool for one replayable call, and the list to give it back
        to (the pool's lock, counters and poll cost an enqueue more than its other Python work),
        one caller at a time (list.pop and append are atomic), as many as calls at once, as in
        a pool. A forked child opens its own, never its parent's."""
        pid, spares = self._spares
        if pid != os.getpid():
            self._spares = (os.getpid(), spares := [])
        try:
            return spares, spares.pop()
        except IndexError:
            conn = self._new_connection()
            conn._jobs_idle_since = time.monotonic()
            return spares, conn

    def _new_connection(self, **options: Any) -> Any:
        """A connection made as the pool makes its own, not counted against its limit."""
        pool = self.client.connection_pool
        return pool.connection_class(**{**pool.connection_kwargs, **options})

    def _own_connection(self) -> Any:
        """A connection of this process's own, outside the pool, for `settle` and
        `wait_and_fetch` (a worker child's one thread; the pool costs as for `_spare`), and for
        `interrupt_wait` to unblock. A forked child opens its own."""
        pid = os.getpid()
        if self._own is None or self._own[0] != pid:
            conn = self._new_connection()
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

    def close(self) -> None:
        """Close this process's connections to Redis (its own, spares, the client's pools, a
        Sentinel's), as a process or a test done with its server should; each reopens on use."""
        if self._own is not None and self._own[0] == os.getpid():
            self._drop(self._own[1], own=True)
        while self._spares[1]:
            self._spares[1].pop().disconnect()
        if self.wire is not None:
            self.wire.close()  # its own connections and the nodes' pools
            return
        (pool := self.client.connection_pool).disconnect()
        for sentinel in getattr(getattr(pool, "sentinel_manager", None), "sentinels", ()):
            sentinel.connection_pool.disconnect()

    def interrupt_wait(self) -> None:
        """Make a `wait_and_fetch` blocked in this process return now (safe in a signal handler),
        from a connection of its own (the handler may have interrupted this thread inside the
        pool, holding its lock). If Redis does not answer, the wait ends within its timeout."""
        if self._own is None or self._own[0] != os.getpid() or self._own_id is None:
            return
        short = {"socket_timeout": UNBLOCK_TIMEOUT, "socket_connect_timeout": UNBLOCK_TIMEOUT}
        conn = self._new_connection(**short)
        try:
            conn.send_command("CLIENT", "UNBLOCK", self._own_id)
            conn.read_response()
        except redis.RedisError:
            pass
        finally:
            conn.disconnect()
