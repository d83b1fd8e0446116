"""An idle worker child's wait on a Redis Cluster: one BLPOP per queue, woken by any of them.

On one server a child blocks on every queue's wake key in one BLPOP (RedisBroker.wait_and_fetch).
On a Cluster each wake key is on its queue's slot and a BLPOP takes keys of one slot only, so
the child blocks on each queue's wake key on a connection of its own to the node owning it, and
waits on all their sockets at once (select): no polling, and a task enqueued on any queue wakes
one child, as on one server (one token per task). Then, in one round trip (fetch.py), it
unblocks the other BLPOPs (`CLIENT UNBLOCK`, sent on its own connection to each node) and
fetches, the woken queue first. A BLPOP that took a token before it was unblocked gives it back
(LPUSH), so that another idle child wakes for that task.

Round trips for an idle child woken by a task: the BLPOP's answer, then one (the unblocks and
the fetch), then one more only when a queue before the woken one has work too. Connections: one
per queue served, per child, beside one per node for the fetches.

A SIGTERM's handler unblocks every BLPOP of the child (`interrupt_wait`), each from a new
connection to its node (the handler may have cut into a pool's lock).
"""

from __future__ import annotations

import os
import select
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
from hiredis import pack_command
from redis.cluster import ClusterNode
from redis.crc import key_slot
from redis.exceptions import MovedError, ResponseError

from django_jobs.broker.connection import UNBLOCK_TIMEOUT
from django_jobs.broker.fetch import FetchCalls
from django_jobs.broker.protocol import Delivery

#: Seconds a child waits for its BLPOPs' answers past their own timeout (Redis answers nil then).
MARGIN = 1.0


class ClusterWait(FetchCalls):
    """`cluster_wait`, and `interrupt_wait` for it (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: queue -> (node name, connection): this process's BLPOP connection of each queue.
        self._waits: dict[str, tuple[str, Any]] = {}
        self._waits_pid = os.getpid()
        #: connection -> its CLIENT ID (for CLIENT UNBLOCK), while it is known.
        self._wait_ids: dict[int, int] = {}
        #: A BLPOP's error reply in this wait (a wake key of another type), if any.
        self._wait_error: ResponseError | None = None

    if TYPE_CHECKING:  # receipts.ReceiptCalls' (RedisBroker mixes in both)

        def give_back_unsure(self) -> int: ...

    def _wait_connection(self, queue: str, node: ClusterNode) -> Any:
        if self._waits_pid != os.getpid():  # a forked child opens its own
            self._waits, self._wait_ids, self._waits_pid = {}, {}, os.getpid()
        known = self._waits.get(queue)
        if known is not None and known[0] == node.name:
            return known[1]
        if known is not None:
            known[1].disconnect()
        if node.redis_connection is None:
            raise redis.ConnectionError(f"no connection to Cluster node {node.name}")
        conn = node.redis_connection.connection_pool.make_connection()
        conn.register_connect_callback(self._on_wait_connect)
        self._waits[queue] = (node.name, conn)
        return conn

    def _on_wait_connect(self, conn: Any) -> None:
        try:
            conn.send_command("CLIENT", "ID")
            self._wait_ids[id(conn)] = int(conn.read_response())
        except ResponseError:
            self._wait_ids.pop(id(conn), None)  # CLIENT denied: a stop waits out the BLPOP

    def cluster_wait(self, queues: Sequence[str], timeout: float) -> list[Delivery]:
        """Block until a wake-up token for one of queues arrives or timeout seconds pass, then
        fetch one task (see the module)."""
        assert self.wire is not None
        blocked: dict[int, tuple[ClusterNode, Any]] = {}
        self._wait_error = None
        with self.unavailable():
            # What fetches whose reply was lost took goes back first, as on one server
            # (RedisBroker.fetch): the give-back's wake-up tokens end the BLPOPs at once.
            self.give_back_unsure()
            for index, queue in enumerate(queues):
                wake = self.keys(queue).wake
                node = self.wire.node(key_slot(wake.encode()))
                conn = self._wait_connection(queue, node)
                try:
                    blpop: tuple[Any, ...] = ("BLPOP", wake, timeout)
                    conn.send_packed_command([pack_command(blpop)], False)
                except redis.ConnectionError:
                    self._drop_wait(queue)
                    if not blocked and index == len(queues) - 1:
                        raise
                    continue
                blocked[index] = (node, conn)
            sockets = {conn._sock: index for index, (_, conn) in blocked.items()}
            answered, _, _ = select.select(list(sockets), [], [], timeout + MARGIN)
            woken = [
                i for i in sorted(sockets[s] for s in answered) if self._took(queues, i, blocked)
            ]
            unblock = [
                (node, "CLIENT", "UNBLOCK", self._wait_ids[id(conn)])
                for node, conn in blocked.values()
                if id(conn) in self._wait_ids
            ]
            _, deliveries, failed = self.fetch(
                queues, 1, own=True, lead=unblock, first=woken[0] if woken else None
            )
            # Past the fetch only tokens are at stake: an error here leaves its tasks to the child.
            error = self._read_rest(queues, blocked, woken)
            if deliveries and len(woken) > 1:
                # More tokens taken than tasks: give them back for other idle children.
                spare = [("LPUSH", self.keys(queues[i]).wake, "1") for i in woken[1:]]
                try:
                    self._round_trip(spare, own=True)
                except redis.RedisError:
                    pass  # a token is a hint: an idle child also looks at its BLPOP's timeout
            if failed is not None:
                raise failed
            if error is not None and not deliveries:
                raise error
        if self._wait_error is not None and not deliveries:
            # BLPOP fails at once on such a key: without this error, an idle child would
            # call again at once, forever. The worker backs off on it.
            raise self._wrong_wake_key(queues, self._wait_error)
        return deliveries

    def _read_rest(
        self, queues: Sequence[str], blocked: dict[int, Any], woken: list[int]
    ) -> Exception | None:
        """Read the answers of the BLPOPs still blocked (unblocked by the fetch's round trip),
        adding those that took a token to woken; a connection that got no unblock (its CLIENT
        ID denied) is dropped instead of waited for. Returns the first read's error, if any
        (its connection dropped, the others read on); one whose connection broke counts as
        woken instead (`_took`)."""
        error: Exception | None = None
        for index in sorted(blocked):
            if id(blocked[index][1]) not in self._wait_ids:
                del blocked[index]
                self._drop_wait(queues[index])
                continue
            try:
                if self._took(queues, index, blocked):
                    woken.append(index)
            except (redis.RedisError, OSError) as exc:
                error = error or exc
        return error

    def _took(self, queues: Sequence[str], index: int, blocked: dict[int, Any]) -> bool:
        """Read the answer of queue index's BLPOP: whether it took a token."""
        _node, conn = blocked.pop(index)
        try:
            reply = conn.read_response(disable_decoding=True)
        except MovedError as exc:  # the slot moved: the fetch goes to the new owner
            assert self.wire is not None
            self.wire.nodes.move_slot(exc)
            return False
        except ResponseError as exc:
            self._wait_error = exc  # a wake key of another type: the fetch still looks at it
            return False
        except redis.ConnectionError:
            # Its answer is lost with the connection: it may have taken a token, so the fetch
            # looks at its queue as woken (a token given back that none took is only a hint).
            self._drop_wait(queues[index])
            return True
        except BaseException:
            self._drop_wait(queues[index])
            raise
        return reply is not None

    def _drop_wait(self, queue: str) -> None:
        known = self._waits.pop(queue, None)
        if known is not None:
            self._wait_ids.pop(id(known[1]), None)
            known[1].disconnect()

    def close(self) -> None:
        """Close this process's BLPOP connections too (see ScriptCalls.close)."""
        for queue in list(self._waits) if self._waits_pid == os.getpid() else ():
            self._drop_wait(queue)
        super().close()

    def interrupt_wait(self) -> None:
        """Make a wait blocked in this process return now (safe in a signal handler): on a
        Cluster, each BLPOP unblocked from a new connection to its node."""
        if self.wire is None:
            super().interrupt_wait()
            return
        if self._waits_pid != os.getpid():
            return
        short = {"socket_timeout": UNBLOCK_TIMEOUT, "socket_connect_timeout": UNBLOCK_TIMEOUT}
        for name, conn in list(self._waits.values()):
            client_id = self._wait_ids.get(id(conn))
            node = self.wire.nodes.get_node(node_name=name)
            if client_id is None or node is None or node.redis_connection is None:
                continue
            pool = node.redis_connection.connection_pool
            other: Any = pool.connection_class(**{**pool.connection_kwargs, **short})
            try:
                other.send_command("CLIENT", "UNBLOCK", client_id)
                other.read_response()
            except redis.RedisError:
                pass
            finally:
                other.disconnect()
