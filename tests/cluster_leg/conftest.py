"""The Cluster leg's own tests: real workers on a 3-master Redis Cluster of this module's own.

They run in the Cluster leg only (`nox -s cluster`, which is `python -m tests.cluster`: the
broker and worker integration tests against a Cluster, then these); the other legs leave this
directory out (tests/conftest.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import Worker
from tests.cluster import ClusterSetup


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSetup]:
    """3 masters, no replicas, for the tests of one module."""
    setup = ClusterSetup(tmp_path_factory.mktemp("cluster"))
    setup.start()
    yield setup
    setup.stop()


@pytest.fixture
def on_cluster(cluster: ClusterSetup, settings: Any) -> str:
    """Point JOBS at the cluster, under a namespace of this test's own; return the namespace."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    settings.JOBS = {**getattr(settings, "JOBS", {}), "REDIS_URL": cluster.url,
                     "NAMESPACE": namespace}  # fmt: skip
    return namespace


@pytest.fixture
def cluster_worker(cluster: ClusterSetup, on_cluster: str, tmp_path: Path) -> Iterator[Worker]:
    """A runworker on the cluster (start it with .start(*args, **JOBS)); the cache's URL is one
    node's, unused."""
    plain = f"redis://127.0.0.1:{cluster.nodes[0].port}/0"
    worker = Worker(plain, on_cluster, tmp_path / "worker.log")
    yield worker
    worker.kill()
