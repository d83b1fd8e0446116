"""A Sentinel setup of a test's own: a primary, a replica and one sentinel on free ports.

`sentinel_setup` (a fixture: import it into the test module) starts them and tears them down;
`SentinelSetup.failover()` asks the sentinel to switch the replica in and waits until it has.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import free_port, wait_until

SERVICE = "jobs"


class Process:
    """One redis-server (or sentinel) process with its config file."""

    def __init__(self, executable: str, directory: Path, config: str) -> None:
        self.port = free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "redis.conf"
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\nsave ''\nappendonly no\ndir {directory}\n"
            + config.replace("{port}", str(self.port))
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
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


class SentinelSetup:
    """A primary, a replica of it, and a sentinel watching them as SERVICE (quorum 1).

    min_replicas: each server's min-replicas-to-write (with min-replicas-max-lag 1): a primary
    that lost its replica (an old one, after a failover) refuses writes a second later.
    """

    def __init__(self, executable: str, directory: Path, min_replicas: int = 0) -> None:
        self.min_replicas = min_replicas
        guard = f"min-replicas-to-write {min_replicas}\nmin-replicas-max-lag 1\n"
        self.primary = Process(executable, directory / "a", guard)
        self.replica = Process(
            executable, directory / "b", f"replicaof 127.0.0.1 {self.primary.port}\n{guard}"
        )
        self.sentinel = Process(
            executable,
            directory / "s",
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n",
        )

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{SERVICE}/0"

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        wait_until(lambda: self._info(self.replica).get("master_link_status") == "up", timeout=10)
        self.sentinel.start("--sentinel")
        wait_until(self._sentinel_knows_replica, timeout=15)

    def _info(self, process: Process) -> dict[str, object]:
        with process.client() as client:
            return dict(client.info("replication"))

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
        wait_until(lambda: self._info(new).get("role") == "master", timeout=15)
        return new, former

    def demoted(self, former: Process) -> None:
        """Wait until the former primary is a replica of the new one, in sync."""

        def synced() -> bool:
            info = self._info(former)
            return info.get("role") == "slave" and info.get("master_link_status") == "up"

        wait_until(synced, timeout=20, interval=0.05)

    def stop(self) -> None:
        for process in (self.sentinel, self.replica, self.primary):
            process.stop()


@pytest.fixture
def sentinel_setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SentinelSetup]:
    """A SentinelSetup; parametrize indirectly with min_replicas (default 0)."""
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server).")
    min_replicas = getattr(request, "param", 0)
    setup = SentinelSetup(executable, tmp_path / "sentinel", min_replicas)
    setup.start()
    yield setup
    setup.stop()
