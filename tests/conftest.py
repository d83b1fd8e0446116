"""Fixtures shared by every test.

- `redis_ns`: an isolated namespace on the REDIS_URL server (default redis://127.0.0.1:6379/0),
  with JOBS pointed at it; only keys under that namespace are deleted afterwards.
- `private_redis`: a redis-server of the test's own on a free port, to stop, restart or freeze.
- The database comes from DATABASE_URL (see testproject/settings.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.ports import free_port as free_port

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: The Cluster leg's own tests (tests/cluster_leg) run only in that leg, `python -m tests.cluster`
#: (nox -s cluster), which points TEST_REDIS_URL at a Cluster it started.
CLUSTER_LEG = os.environ.get("TEST_REDIS_URL", "").startswith("redis+cluster://")
collect_ignore = [] if CLUSTER_LEG else ["cluster_leg"]

#: Fixtures through which a test reaches the database (pytest-django's; item.fixturenames is the
#: whole closure, so a fixture of ours that uses `db` counts too).
DATABASE_FIXTURES = frozenset(
    {
        "_django_db_helper",
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
        "admin_user",
        "admin_client",
    }
)


def has_test_database(item: pytest.Item) -> bool:
    """Whether a test has pytest-django's test database: its marker or one of its fixtures."""
    if item.get_closest_marker("django_db"):
        return True
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


def uses_database(item: pytest.Item) -> bool:
    """Whether a test can touch the database: pytest-django refuses database access to any
    other, and the acceptance tests' subprocesses (manage.py, runworker) use one of their own."""
    return item.nodeid.startswith("tests/acceptance/") or has_test_database(item)


#: Folders whose tests start processes (runworker, manage.py, mypy): seconds each, where most
#: other tests take milliseconds.
PROCESS_FOLDERS = ("tests/acceptance/", "tests/typing/")


def starts_processes_without_test_database(item: pytest.Item) -> bool:
    """Whether a test starts processes and has no test database of pytest-django's (neither its
    marker nor one of its fixtures): pytest-django's order cannot concern it."""
    return item.nodeid.startswith(PROCESS_FOLDERS) and not has_test_database(item)


@pytest.hookimpl(trylast=True)  # after pytest-django's sort, which this keeps for its tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """JOBS_TESTS_DATABASE_ONLY=1 (the py312-newest-sqlite leg, see noxfile.py) runs only the
    tests that can touch the database: the others run the same code on every database, and the
    py312-newest-postgres leg runs them on this Python and Django.

    Then the tests that start processes and have no test database go first, in their order:
    pytest-django puts every test without the database last, so they ran last, and under the
    legs' `-n 4` one pytest worker ran the final acceptance tests while the other three had
    finished (postgres leg: idle 87, 110 and 141 s at the end). Handed out one at a time in
    this order (the legs' --maxschedchunk 1, noxfile.py), the long tests spread over the workers
    first and the last to finish take milliseconds. The database tests keep pytest-django's
    order among them.
    """
    if os.environ.get("JOBS_TESTS_DATABASE_ONLY") == "1":
        keep = [item for item in items if uses_database(item)]
        dropped = [item for item in items if not uses_database(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    first = [item for item in items if starts_processes_without_test_database(item)]
    rest = [item for item in items if not starts_processes_without_test_database(item)]
    items[:] = first + rest


def wait_until(
    predicate: Any, timeout: float = 10.0, interval: float = 0.01, why: Any = None
) -> Any:
    """Poll predicate until it returns something truthy; fail the test at the deadline.

    `why` (a callable) adds context to the failure, such as a worker's output.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            context = f"\n{why()}" if why is not None else ""
            pytest.fail(f"condition not met within {timeout}s: {predicate}{context}")
        time.sleep(interval)


def plain_client(url: str, **options: Any) -> redis.Redis:
    """A client of the tests' Redis: a RedisCluster for a `redis+cluster://` URL (the Cluster
    leg: `python -m tests.cluster`), else redis-py's own from the URL."""
    if url.startswith("redis+cluster://"):
        host, _, port = url.removeprefix("redis+cluster://").split(",")[0].rpartition(":")
        return redis.RedisCluster(host=host, port=int(port), **options)  # type: ignore[return-value]
    return redis.Redis.from_url(url, **options)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The shared Redis server's URL; the test run fails (not skips) if it does not answer."""
    url = os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        plain_client(url, socket_connect_timeout=2).ping()
    except (redis.RedisError, OSError) as exc:
        pytest.fail(f"Redis does not answer at {url} ({exc}); start it or set REDIS_URL.")
    return url


@dataclass
class RedisNamespace:
    """One test's private corner of a Redis server."""

    url: str
    namespace: str
    client: redis.Redis

    def keys(self) -> list[str]:
        """Every key under this namespace, sorted."""
        return sorted(k.decode() for k in self.client.scan_iter(match=f"{self.namespace}:*"))

    def cleanup(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.namespace}:*", count=1000))
        for start in range(0, len(keys), 500):
            self.client.delete(*keys[start : start + 500])


@pytest.fixture
def redis_ns(redis_url: str, settings: Any) -> Iterator[RedisNamespace]:
    """Enable jobs on the shared Redis under a namespace of this test's own."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    settings.JOBS = {
        **getattr(settings, "JOBS", {}),
        "REDIS_URL": redis_url,
        "NAMESPACE": namespace,
    }
    ns = RedisNamespace(redis_url, namespace, plain_client(redis_url))
    yield ns
    ns.cleanup()
    ns.client.close()


class Freezable:
    """A server process a test may freeze (SIGSTOP) and thaw (SIGCONT)."""

    process: subprocess.Popen[bytes] | None

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


class RedisServer(Freezable):
    """A redis-server process owned by one test: start, stop, kill, freeze and thaw it."""

    def __init__(self, executable: str, directory: Path) -> None:
        self.executable = executable
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def start(self) -> None:
        args = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(
                    f"redis-server exited with {self.process.returncode} on port {self.port}"
                )
            try:
                return bool(self.client(socket_connect_timeout=0.2).ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, timeout=10)

    def stop(self) -> None:
        """Stop the server (SIGTERM after SIGCONT, in case it is frozen) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server on a free port, stopped after the test."""
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.fail(
            "redis-server is not installed (apt-get install redis-server); tests that "
            "stop or freeze Redis need their own server."
        )
    server = RedisServer(executable, tmp_path)
    server.start()
    yield server
    server.stop()
