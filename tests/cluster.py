"""A Redis Cluster of a test's own: 3 masters (each with a replica when asked) on free ports,
on TLS when given certificates (tests/tls.py).

`ClusterSetup` starts the servers (tests/sentinel.py's `Process`), joins them with
`redis-cli --cluster create`, and tears them down; `move_slot` moves one slot between masters
the way `redis-cli --cluster reshard` does (SETSLOT IMPORTING/MIGRATING, MIGRATE in batches,
SETSLOT NODE), in steps a test can interleave with work. `cluster_setup` is a fixture (import it
into the test module); `cluster_session` one per test session (the cluster leg's, see
tests/integration/cluster/conftest.py).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import key_slot

from tests.conftest import wait_until
from tests.ports import bindable, ephemeral_low, free_port
from tests.sentinel import Process
from tests.tls import Certs, TLSProcess

#: Each node's cluster settings: a short node timeout, so that a failover takes seconds.
NODE_CONFIG = (
    "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 2000\n"
    "cluster-require-full-coverage yes\n"
)


def cluster_port() -> int:
    """A free port whose cluster bus port (10000 higher) is free too, both below the kernel's
    ephemeral range (tests/ports.py: seen with pytest -n 4, "bind: Address already in use" on a
    bus port, the node exited)."""
    while True:
        port = free_port(below=ephemeral_low() - 10000)
        if port + 10000 <= 65535 and bindable(port + 10000):
            return port


def _executable(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (apt-get install redis-server redis-tools).")
    return found


class ClusterSetup:
    """Three masters, slots split evenly, and `replicas` replicas of each; with `certs`, every
    node on TLS only (clients, replication and the cluster bus)."""

    def __init__(self, directory: Path, replicas: int = 0, certs: Certs | None = None) -> None:
        server = _executable("redis-server")
        self.cli = _executable("redis-cli")
        count = 3 * (1 + replicas)
        self.replicas = replicas
        self.certs = certs
        self.nodes: list[Process] = [
            Process(server, directory / f"n{i}", NODE_CONFIG, port=cluster_port())
            if certs is None
            else TLSProcess(server, directory / f"n{i}", NODE_CONFIG, cluster_port(), certs=certs)
            for i in range(count)
        ]

    @property
    def url(self) -> str:
        """The `redis+cluster://` URL of the first two masters (the client finds the rest);
        `rediss+cluster://` with the certificates in its query on TLS."""
        nodes = f"127.0.0.1:{self.nodes[0].port},127.0.0.1:{self.nodes[1].port}"
        if self.certs is None:
            return f"redis+cluster://{nodes}"
        return f"rediss+cluster://{nodes}?{self.certs.query}"

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        tls = [] if self.certs is None else self.certs.cli_args()
        subprocess.run(
            [self.cli, *tls, "--cluster", "create", *addresses, "--cluster-replicas",
             str(self.replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        wait_until(self._settled, timeout=30, interval=0.05)

    def _settled(self) -> bool:
        """Every node says the cluster is ok and knows every node (replicas synced)."""
        for node in self.nodes:
            with node.client(decode_responses=True) as client:
                info = client.execute_command("CLUSTER INFO")
                if info["cluster_state"] != "ok":
                    return False
                if int(info["cluster_known_nodes"]) != len(self.nodes):
                    return False
                replication = client.info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
        return True

    def client(self) -> redis.RedisCluster:
        tls = {} if self.certs is None else self.certs.client_options()
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **tls)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    # -- slots ------------------------------------------------------------------------------

    def owner(self, slot: int) -> Process:
        """The master that owns slot, by the nodes' own map."""
        with self.nodes[0].client(decode_responses=True) as client:
            for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return next(n for n in self.nodes if n.port == int(master[1]))
        raise AssertionError(f"slot {slot} is not covered")

    def masters(self) -> list[Process]:
        found = []
        for node in self.nodes:
            with node.client(decode_responses=True) as client:
                if client.info("replication")["role"] == "master":
                    found.append(node)
        return found

    def move_slot(
        self,
        slot: int,
        target: Process,
        *,
        batch: int = 10,
        between: Callable[[], None] | None = None,
    ) -> int:
        """Move slot to target as `redis-cli --cluster reshard` does: keys in batches of
        `batch` (MIGRATE), `between()` called after each batch; return the keys moved."""
        source = self.owner(slot)
        if source is target:
            return 0
        masters = self.masters()
        self.open_move(slot, source, target)
        moved = 0
        with source.client(decode_responses=True) as src:
            while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, batch):
                src.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *keys
                )
                moved += len(keys)
                if between is not None:
                    between()
        self.close_move(slot, target, [source, *masters])
        return moved

    @staticmethod
    def open_move(slot: int, source: Process, target: Process) -> None:
        """Mark slot IMPORTING on target from source, then MIGRATING on source to target."""
        with source.client() as src, target.client() as dst:
            source_id, target_id = src.cluster("MYID"), dst.cluster("MYID")
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)

    @staticmethod
    def close_move(slot: int, target: Process, others: list[Process]) -> None:
        """Give slot to target: on target first, then on each of `others` (the source first)."""
        with target.client() as dst:
            target_id = dst.cluster("MYID")
            dst.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
        for other in dict.fromkeys(others):  # once each
            if other is not target:
                with other.client() as client:
                    client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)


def slot_of(key: str) -> int:
    return key_slot(key.encode())


@pytest.fixture
def cluster_setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClusterSetup]:
    """A ClusterSetup of 3 masters; parametrize indirectly with the replicas per master."""
    setup = ClusterSetup(tmp_path / "cluster", getattr(request, "param", 0))
    setup.start()
    yield setup
    setup.stop()


def main(argv: list[str]) -> int:
    """`python -m tests.cluster [pytest arguments]`: start a cluster (3 masters, a replica
    each), run pytest with TEST_REDIS_URL set to it, stop it; pytest's exit code."""
    import os
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="jobs-cluster-") as directory:
        setup = ClusterSetup(Path(directory), replicas=1)
        setup.start()
        try:
            env = {**os.environ, "TEST_REDIS_URL": setup.url}
            return subprocess.run([sys.executable, "-m", "pytest", *argv], env=env).returncode
        finally:
            setup.stop()


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
