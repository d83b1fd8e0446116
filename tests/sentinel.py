"""A Sentinel setup of a test's own: a primary, a replica and one sentinel on free ports.

`sentinel_setup` (a fixture: import it into the test module) starts them and tears them down;
`SentinelSetup.failover()` asks the sentinel to switch the replica in and waits until it has,
`SentinelSetup.crash()` kills the primary (kill -9) and lets the sentinel promote the replica.
`ReplicaPair` is a primary and a replica without a sentinel (JOBS["REPLICA_ACKS"]' tests).

A replica may follow its primary through a proxy that holds what the primary sends it for `lag`
seconds (a replica that far behind: a busy one, or a slow link); a crash stops that proxy with
the primary, so what it held is gone, as with the primary's host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.chaos.proxy import Proxy
from tests.conftest import Freezable, free_port, wait_until

SERVICE = "jobs"
#: Runs that measure what a failover loses without a guard (min-replicas-to-write, or
#: REPLICA_ACKS): the documented risk, counted and printed, not asserted (docs/scale-redis.rst,
#: docs/scale.rst); they wait out the same failover as the guarded runs, so only when asked.
UNGUARDED = pytest.mark.skipif(
    not os.environ.get("JOBS_SENTINEL_UNGUARDED"),
    reason="set JOBS_SENTINEL_UNGUARDED=1 to measure a failover without a guard",
)


class Process(Freezable):
    """One redis-server (or sentinel) process with its config file."""

    def __init__(self, executable: str, directory: Path, config: str, port: int = 0) -> None:
        self.port = port or free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "redis.conf"
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\nsave ''\nappendonly no\ndir {directory}\n"
            # a replica's first sync at once, not after the default 5 s wait for others
            "repl-diskless-sync-delay 0\n" + config.replace("{port}", str(self.port))
        )
        self.executable = executable
        self.process: subprocess.Popen[bytes] | None = None

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, **kwargs)  # type: ignore[arg-type]

    def start(self, *args: str) -> None:
        with (self.directory / "log").open("ab") as log:
            self.process = subprocess.Popen(
                [self.executable, str(self.config), *args], stdout=log, stderr=subprocess.STDOUT
            )

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"{self.config} exited: {(self.directory / 'log').read_text()}")
            try:
                with self.client(socket_connect_timeout=0.2) as client:
                    return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, timeout=10)

    def stop(self) -> None:
        """kill -9 it (a frozen one too) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def replication(self) -> dict[str, object]:
        """Its INFO replication (role, master_link_status, ...)."""
        with self.client() as client:
            return dict(client.info("replication"))


class ReplicaPair:
    """A primary and a replica of it, the replica `lag` seconds behind (through a proxy)."""

    def __init__(
        self, executable: str, directory: Path, lag: float = 0.0, config: str = ""
    ) -> None:
        self.primary = Process(executable, directory / "a", config)
        self.replica = Process(executable, directory / "b", config)
        self.lag = lag
        self.link: Proxy | None = None

    def start(self) -> None:
        self.primary.start()
        upstream = self.primary.port
        if self.lag:
            self.link = Proxy(self.primary.port, return_delay=self.lag).start()
            upstream = self.link.port
        self.replica.start("--replicaof", "127.0.0.1", str(upstream))
        wait_until(lambda: self.replica.replication().get("master_link_status") == "up", timeout=10)

    def crash(self) -> float:
        """kill -9 the primary, and drop what its link to the replica held; return when
        (time.time(), as the chaos job's log dates its runs)."""
        assert self.primary.process is not None
        self.primary.process.kill()
        at = time.time()
        if self.link is not None:
            self.link.stop()
        self.primary.stop()
        return at

    def stop(self) -> None:
        for process in (self.replica, self.primary):
            process.stop()
        if self.link is not None:
            self.link.stop()


class SentinelSetup:
    """A primary, a replica of it, and a sentinel watching them as SERVICE (quorum 1).

    min_replicas: each server's min-replicas-to-write (with min-replicas-max-lag 1): a primary
    that lost its replica (an old one, after a failover) refuses writes a second later.
    """

    def __init__(
        self,
        executable: str,
        directory: Path,
        min_replicas: int = 0,
        *,
        lag: float = 0.0,
        chained: bool = False,
    ) -> None:
        self.min_replicas = min_replicas
        guard = f"min-replicas-to-write {min_replicas}\nmin-replicas-max-lag 1\n"
        self.pair = ReplicaPair(executable, directory, lag, guard)
        self.primary, self.replica = self.pair.primary, self.pair.replica
        #: chained: a second replica, of the replica, so that a promoted replica has one at once.
        self.chained = Process(executable, directory / "c", guard) if chained else None
        # The sentinel re-points a replica whose primary's address is not the one it monitors
        # (the lagging link's proxy) after failover-timeout: not within a test.
        timeout = 60000 if lag else 5000
        self.sentinel = Process(
            executable,
            directory / "s",
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} {timeout}\n",
        )

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{SERVICE}/0"

    def start(self) -> None:
        self.pair.start()
        chained = self.chained
        if chained is not None:
            chained.start("--replicaof", "127.0.0.1", str(self.replica.port))
            wait_until(lambda: chained.replication().get("master_link_status") == "up")
        self.sentinel.start("--sentinel")
        wait_until(self._sentinel_knows_replica, timeout=15)

    def _sentinel_knows_replica(self) -> bool:
        with self.sentinel.client(decode_responses=True) as client:
            replicas = client.sentinel_slaves(SERVICE)
        return any(
            r["port"] == self.replica.port and not r["is_sdown"] and r["master-link-status"] == "ok"
            for r in replicas
        )

    def master_port(self) -> int:
        with self.sentinel.client(decode_responses=True) as client:
            _, port = client.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def failover(self) -> tuple[Process, Process]:
        """Switch the replica in (SENTINEL FAILOVER); return (new primary, old) once the
        sentinel names the new one and it says it is the primary.

        The old primary is still one until the sentinel's next look at it (up to 10 s):
        `demoted` waits for that.
        """
        old = self.master_port()
        new, former = (
            (self.replica, self.primary)
            if old == self.primary.port
            else (self.primary, self.replica)
        )
        with self.sentinel.client() as client:
            client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        wait_until(lambda: self.master_port() == new.port, timeout=15)
        wait_until(lambda: new.replication().get("role") == "master", timeout=15)
        return new, former

    def demoted(self, former: Process) -> None:
        """Wait until the former primary is a replica of the new one, in sync."""

        def synced() -> bool:
            info = former.replication()
            return info.get("role") == "slave" and info.get("master_link_status") == "up"

        wait_until(synced, timeout=20, interval=0.05)

    def crash(self) -> tuple[float, float]:
        """kill -9 the primary (and its lagging link); wait until the sentinel has promoted the
        replica and it says it is the primary. Returns (the kill, the promotion) as time.time()."""
        at = self.pair.crash()
        wait_until(lambda: self.master_port() == self.replica.port, timeout=30, interval=0.05)
        wait_until(lambda: self.replica.replication().get("role") == "master", timeout=15)
        return at, time.time()

    def stop(self) -> None:
        self.sentinel.stop()
        if self.chained is not None:
            self.chained.stop()
        self.pair.stop()


def redis_server() -> str:
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server).")
    return executable


@pytest.fixture
def sentinel_setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SentinelSetup]:
    """A SentinelSetup; parametrize indirectly with min_replicas (default 0), or with a dict of
    its arguments ({"lag": 0.05, "chained": True})."""
    param = getattr(request, "param", 0)
    options = param if isinstance(param, dict) else {"min_replicas": param}
    setup = SentinelSetup(redis_server(), tmp_path / "sentinel", **options)
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()
