"""Redis Cluster: a client of the nodes through redis-py's `RedisCluster`, and the wire the
broker's scripts travel on there.

`factory.connect` calls `cluster_client` for a `redis+cluster://` URL (parsed by
`django_jobs.conf.redis_url`). redis-py routes every plain command by its key's slot and follows
the Cluster's redirections itself. The broker's scripts (`ScriptCalls`) travel on `ClusterWire`
instead, the Cluster's form of the single server's one round trip (`ScriptCalls._round_trip`):

- each command goes to the primary owning its first key's slot; the commands of one call are
  written to each node in one write, every node's write before any read, so a call costs one
  round trip of latency whatever the number of nodes it reaches;
- `MOVED` (the slot lives elsewhere now: a resharding, a failover) updates that slot in the map
  and sends the command again to its new owner, and refreshes the whole map at most once a
  second; `ASK` (the slot is being moved and the key is already there) sends it to the target
  once, preceded by `ASKING`; `TRYAGAIN` (a call whose keys are split by a slot being moved) and
  `CLUSTERDOWN` (a failover under way) are sent again after a short pause. None of these ran,
  so sending again is safe for any command, a dequeue included. Past the call's time budget the
  error reply is left in place (the broker raises it as `BrokerUnavailable`);
- a node that does not answer before the write is retried after a refresh of the map (a
  failover); after the write, only when its commands are safe to run twice (`replayable`).

Every script of ours touches the keys of one slot (tests/integration/test_cluster_slots.py);
those that find task records inside Lua also name a key that never exists (`QueueKeys.guard`,
`paused` for dequeue), so that a node moving their slot answers `TRYAGAIN` before they start
instead of failing half-way on a record already moved.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Sequence
from typing import Any

import redis
from django.views.decorators.debug import sensitive_variables
from hiredis import pack_command
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)

from django_jobs.conf.redis_url import ClusterURL

#: Seconds between two refreshes of the whole slot map on MOVED (each MOVED fixes its own slot).
REFRESH_EVERY = 1.0
#: The first pause before a command answered TRYAGAIN or CLUSTERDOWN is sent again, doubling.
PAUSE = 0.01
#: The longest such pause.
MOST_PAUSE = 0.2
ASKING = pack_command(("ASKING",))


@sensitive_variables("target", "options")
def cluster_client(target: ClusterURL, options: dict[str, Any]) -> RedisCluster:
    """A client of the Cluster `target` names; `options` are each node's connection's
    (timeouts, decoding), and `retry` the client's. A `rediss+cluster://` target's connections
    to every node use TLS, with its options (`ssl_ca_certs`, ...: redis-py's own).

    redis-py asks the nodes for the slot map as it is built: a Cluster that no listed node
    answers for raises redis.ConnectionError here (the broker factory's caller sees
    BrokerUnavailable).
    """
    options = dict(options)
    retry = options.pop("retry")
    nodes = [ClusterNode(host, port) for host, port in target.nodes]  # type: ignore[no-untyped-call]
    tls = {} if target.tls is None else {"ssl": True, **target.tls}
    try:
        return RedisCluster(
            startup_nodes=nodes,
            username=target.username,
            password=target.password,
            retry=retry,
            **tls,
            **options,
        )
    except redis.RedisError as exc:
        raise redis.ConnectionError(f"no node of the Cluster answered ({exc})") from None
    except RedisClusterException as exc:
        raise redis.ConnectionError(f"the Cluster's nodes could not be reached ({exc})") from None


def command_slot(command: Sequence[Any]) -> int:
    """The slot of a command's first key (EVALSHA: its first key; others: their first argument)."""
    key = command[3] if command[0] == "EVALSHA" else command[1]
    return key_slot(key.encode() if isinstance(key, str) else key)


class ClusterWire:
    """Script calls and commands sent to the nodes owning their slots (see the module)."""

    def __init__(self, client: RedisCluster, timeout: float, fragile: Collection[str]) -> None:
        self.client = client
        self.nodes = client.nodes_manager
        #: The longest a call spends following redirections and waiting out TRYAGAIN.
        self.timeout = timeout
        #: The SHAs of the scripts that must not run twice (see connection.NOT_REPLAYABLE).
        self.fragile = frozenset(fragile)
        #: This process's own connection to each node (by node name), and the pid they belong to.
        self._own: dict[str, Any] = {}
        self._own_pid = os.getpid()
        self._refreshed = 0.0

    # -- routing ----------------------------------------------------------------------------

    def node(self, slot: int) -> ClusterNode:
        """The primary that owns slot, by the map this client holds."""
        return self.nodes.get_node_from_slot(slot)

    def refresh(self, *, now: bool = False) -> None:
        """Ask the nodes for the slot map again (at most once per REFRESH_EVERY unless now)."""
        if not now and time.monotonic() - self._refreshed < REFRESH_EVERY:
            return
        self._refreshed = time.monotonic()
        try:
            self.nodes.initialize()
        except (redis.RedisError, RedisClusterException):
            pass  # no node answers: the next call tries again

    def _named(self, host: str, port: int) -> ClusterNode:
        node = self.nodes.get_node(host=host, port=port)
        if node is None:
            self.refresh(now=True)
            node = self.nodes.get_node(host=host, port=port)
        if node is None or node.redis_connection is None:
            raise redis.ConnectionError(f"the Cluster redirected to {host}:{port}, unknown")
        return node

    # -- connections ------------------------------------------------------------------------

    def own(self, node: ClusterNode) -> Any:
        """This process's own connection to node (outside the pools; a fork opens new ones)."""
        if self._own_pid != os.getpid():
            self._own, self._own_pid = {}, os.getpid()
        conn = self._own.get(node.name)
        if conn is None:
            if node.redis_connection is None:
                raise redis.ConnectionError(f"no connection to Cluster node {node.name}")
            conn = self._own[node.name] = node.redis_connection.connection_pool.make_connection()
        return conn

    def _take(self, node: ClusterNode, own: bool) -> Any:
        if own:
            return self.own(node)
        if node.redis_connection is None:
            raise redis.ConnectionError(f"no connection to Cluster node {node.name}")
        return node.redis_connection.connection_pool.get_connection()

    @staticmethod
    def _give(node: ClusterNode, conn: Any, own: bool) -> None:
        if not own and node.redis_connection is not None:
            node.redis_connection.connection_pool.release(conn)

    # -- the round trip ---------------------------------------------------------------------

    def round_trip(
        self,
        commands: Sequence[tuple[Any, ...]],
        *,
        own: bool,
        replayable: bool = True,
        then: tuple[Any, ...] | None = None,
    ) -> list[Any]:
        """Send commands to their slots' nodes and read the replies: bytes, errors as values.

        A command whose first item is a ClusterNode goes to that node (CLIENT UNBLOCK, which
        has no key). A connection error is raised; see the module for what is sent again.
        `then` (a WAIT: replicas.py) goes after the commands of every write to a node,
        redirections' included; its replies follow the commands', one per command: that of
        the write the command was answered in, on the same connection.
        """
        count = len(commands)
        replies: list[Any] = [None] * count
        fixed = {i: c[0] for i, c in enumerate(commands) if isinstance(c[0], ClusterNode)}
        commands = [c[1:] if isinstance(c[0], ClusterNode) else c for c in commands]
        after: list[Any] = [None] * count if then is not None else []
        asking: dict[int, ClusterNode] = {}  # ASK redirections, for the next write only
        todo = list(range(count))
        deadline = time.monotonic() + self.timeout
        pause = PAUSE
        while True:
            batches: dict[str, tuple[ClusterNode, list[int]]] = {}
            for index in todo:
                node = asking.get(index) or fixed.get(index)
                if node is None:
                    node = self.node(command_slot(commands[index]))
                batches.setdefault(node.name, (node, []))[1].append(index)
            if then is not None:  # each write's own: an index past the commands', dropped after
                for _, indexes in batches.values():
                    indexes.append(len(commands))
                    commands.append(then)
                    replies.append(None)
            redo = self._exchange(batches, commands, set(asking), replies, own, replayable)
            if then is not None:
                for _, indexes in batches.values():
                    *sent, last = indexes
                    for index in set(sent).difference(redo):
                        after[index] = replies[last]
                redo = [index for index in redo if index < count]
                del commands[count:], replies[count:]
            asking, todo, wait = {}, [], False
            for index in redo:
                reply = replies[index]
                if isinstance(reply, MovedError):
                    self.nodes.move_slot(reply)
                    self.refresh()
                elif isinstance(reply, AskError):
                    asking[index] = self._named(reply.host, reply.port)
                else:  # TRYAGAIN, CLUSTERDOWN, or not sent: after a pause
                    wait = True
                todo.append(index)
            if not todo:
                return replies if then is None else replies + after
            if time.monotonic() + (pause if wait else 0.0) > deadline:
                for index in todo:
                    if isinstance(replies[index], Unsent):
                        raise replies[index].error
                # the redirections stay as error replies: the broker raises them
                return replies if then is None else replies + after
            if wait:
                time.sleep(pause)
                pause = min(MOST_PAUSE, pause * 2)

    def _exchange(
        self,
        batches: dict[str, tuple[ClusterNode, list[int]]],
        commands: Sequence[tuple[Any, ...]],
        asking: set[int],
        replies: list[Any],
        own: bool,
        replayable: bool,
    ) -> list[int]:
        """One write to each node, then every node's replies; return the indexes to look at
        again (redirected, or not sent)."""
        sent: list[tuple[ClusterNode, Any, list[int]]] = []
        again: list[int] = []
        failed: BaseException | None = None
        for node, indexes in batches.values():
            try:
                conn = self._take(node, own)
            except redis.ConnectionError as exc:
                self._unsent(indexes, replies, again, exc)
                continue
            packed = b"".join(
                [(ASKING if i in asking else b"") + pack_command(commands[i]) for i in indexes]
            )
            try:
                conn.send_packed_command([packed], check_health=False)
            except redis.ConnectionError as exc:
                self._drop(node, conn, own)
                self._unsent(indexes, replies, again, exc)
                continue
            except BaseException:
                self._drop(node, conn, own)
                raise
            sent.append((node, conn, indexes))
        for at, (node, conn, indexes) in enumerate(sent):
            try:
                for index in indexes:
                    if index in asking:
                        conn.read_response(disable_decoding=True)  # ASKING's OK
                    try:
                        replies[index] = conn.read_response(disable_decoding=True)
                    except ResponseError as exc:
                        replies[index] = exc
                        if isinstance(exc, (MovedError, AskError, TryAgainError, ClusterDownError)):
                            again.append(index)
            except redis.ConnectionError as exc:
                self._drop(node, conn, own)
                if replayable and not any(self._fragile(commands[i]) for i in indexes):
                    self._unsent(indexes, replies, again, exc)
                else:
                    failed = failed or exc
            except BaseException:
                # A timeout, or a signal's exception between two reads: replies may be left
                # unread, on this connection and on those of the nodes not read yet, so none
                # of them may be used again as it is (the next call would read these replies).
                for other, unread, _ in sent[at:]:
                    self._drop(other, unread, own)
                    if unread is not conn:
                        self._give(other, unread, own)
                raise
            finally:
                self._give(node, conn, own)
        if failed is not None:
            raise PartlyAnswered(failed, replies) from failed
        return again

    def _fragile(self, command: tuple[Any, ...]) -> bool:
        return command[0] == "EVALSHA" and command[1] in self.fragile

    def _unsent(
        self, indexes: list[int], replies: list[Any], again: list[int], exc: BaseException
    ) -> None:
        """Commands that did not reach their node: sent again after a refresh of the map."""
        self.refresh(now=True)
        for index in indexes:
            replies[index] = Unsent(exc)
            again.append(index)

    def _drop(self, node: ClusterNode, conn: Any, own: bool) -> None:
        conn.disconnect()
        if own:
            self._own.pop(node.name, None)

    def close(self) -> None:
        """Close this process's own connections and the client's pools (each reopens on its
        next use). Not RedisCluster.close(): it forgets the default node, which keyless
        commands (TIME, PING) are sent to, and they fail until the slot map is read again."""
        for conn in self._own.values():
            conn.disconnect()
        self._own = {}
        for node in self.client.get_nodes():  # type: ignore[no-untyped-call]
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()


class PartlyAnswered(redis.ConnectionError):
    """A round trip whose connection to a node failed after the write, while other nodes
    answered: their replies (bytes, errors as values; None or Unsent where none was read), so
    the caller can act on what did run (the tasks a dequeue took, to give back: fetch.py)."""

    def __init__(self, error: BaseException, replies: list[Any]) -> None:
        super().__init__(str(error))
        self.replies = replies


class Unsent:
    """The reply slot of a command that did not reach its node: why (sent again until the
    call's time budget is spent, then raised)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error
