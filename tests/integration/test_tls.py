"""TLS to Redis (issue 20): `rediss://` to one server, `rediss+sentinel://` to a sentinel and the
primary it names, and `rediss+cluster://` to a Cluster of 3 masters, each a server of the test's
own on TLS only (no plain port: a call that reaches it went over TLS), asking for a client
certificate; the CA and certificates are made for the test (tests/tls.py). A task is enqueued,
waited for and fetched, and acked, through the broker's own connections (the worker child's hot
path, its idle wait), in priority order across masters.
"""

from __future__ import annotations

import gc
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_jobs.broker import factory
from django_jobs.broker.protocol import Action, EnqueueRequest, Verdict
from django_jobs.broker.redis import RedisBroker
from django_jobs.client import get_broker
from django_jobs.exceptions import BrokerUnavailable
from tests.cluster import ClusterSetup, slot_of
from tests.tls import Certs, TLSProcess, make_certs

QUEUES = ["critical", "default", "low"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_server(certs: Certs, tmp_path: Path) -> Iterator[TLSProcess]:
    server = TLSProcess(shutil.which("redis-server") or "redis-server", tmp_path / "tls", "",
                        certs=certs)  # fmt: skip
    server.start()
    yield server
    server.stop()


@pytest.fixture
def tls_cluster(certs: Certs, tmp_path: Path) -> Iterator[ClusterSetup]:
    setup = ClusterSetup(tmp_path / "cluster", certs=certs)
    started = time.monotonic()
    setup.start()
    print(f"\nTLS cluster of 3 masters started in {time.monotonic() - started:.1f}s")
    yield setup
    setup.stop()


#: The brokers this test made, closed after it (`closed`).
OPENED: list[RedisBroker] = []


@pytest.fixture(autouse=True)
def closed() -> Iterator[None]:
    """Close every broker the test made, drop them and collect: a TLS socket is in a reference
    cycle, and one left open is closed by the collector with a ResourceWarning, in whatever test
    runs then (CI at 1805bff: an unclosed SSLSocket failed test_tracing_flows after these)."""
    yield
    while OPENED:
        OPENED.pop().close()
    factory._broker = None  # the process's broker: else it is collected in a later test
    gc.collect()


def on(settings: Any, url: str) -> RedisBroker:
    """The broker for url, under a namespace of this test's own."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    settings.JOBS = {"REDIS_URL": url, "NAMESPACE": namespace, "QUEUES": QUEUES}
    broker = get_broker()
    OPENED.append(broker)
    return broker


def request(task_id: str, queue: str) -> EnqueueRequest:
    return EnqueueRequest(
        id=task_id, queue=queue, encoded='{"v": 1}', delay=0.0, eta=None,
        idempotency_key=None, idempotency_window=0.0,
    )  # fmt: skip


def drain(broker: RedisBroker, count: int) -> list[str]:
    """Wait for a task, then ack each and fetch the next in one round trip: the ids in order."""
    fetched = broker.wait_and_fetch(QUEUES, 5.0)
    order = []
    while fetched:
        (delivery,) = fetched
        order.append(delivery.id)
        ack = Verdict(delivery.id, delivery.queue, delivery.epoch, "probes.Noop", Action.ACK,
                      retention=60)  # fmt: skip
        written, fetched = broker.settle([ack], QUEUES, 1)
        assert written == [True]
        if len(order) > count:
            break
    return order


def test_rediss__one_tls_server_enqueues_fetches_and_acks(
    tls_server: TLSProcess, certs: Certs, settings: Any
) -> None:
    # Given one server on TLS only, and its URL with the CA and a client certificate
    url = f"rediss://127.0.0.1:{tls_server.port}/0?{certs.query}"
    broker = on(settings, url)

    # When a task is enqueued, fetched by the idle wait and acked
    broker.enqueue([request("a" * 32, "default")])

    # Then it ran through, and its record says so on the server
    assert drain(broker, 1) == ["a" * 32]
    with tls_server.client() as client:
        assert client.hget(broker.keys("default").task("a" * 32), "state") == b"completed"


def test_rediss_sentinel__the_sentinel_and_the_primary_it_names_are_both_on_tls(
    tls_server: TLSProcess, certs: Certs, settings: Any, tmp_path: Path
) -> None:
    # Given a sentinel on TLS only, watching the TLS server as "jobs"
    watch = f"sentinel monitor jobs 127.0.0.1 {tls_server.port} 1\n"
    sentinel = TLSProcess(tls_server.executable, tmp_path / "sentinel", watch, certs=certs)
    sentinel.start("--sentinel")
    try:
        broker = on(settings, f"rediss+sentinel://127.0.0.1:{sentinel.port}/jobs/0?{certs.query}")

        # When a task is enqueued, fetched and acked through the primary the sentinel names
        broker.enqueue([request("s" * 32, "low")])

        # Then it ran through, on that server
        assert drain(broker, 1) == ["s" * 32]
        with tls_server.client() as client:
            assert client.hget(broker.keys("low").task("s" * 32), "state") == b"completed"
    finally:
        sentinel.stop()


def test_rediss_cluster__a_tls_cluster_serves_queues_on_several_masters_in_priority_order(
    tls_cluster: ClusterSetup, settings: Any
) -> None:
    # Given a 3-master Cluster on TLS only, with queues on more than one master
    assert tls_cluster.url.startswith("rediss+cluster://")
    broker = on(settings, tls_cluster.url)
    owners = {tls_cluster.owner(slot_of(broker.keys(q).pending)).port for q in QUEUES}
    assert len(owners) > 1, "the queues share one master"

    # When a task is enqueued to each queue, the least urgent first
    ids = {queue: queue[0] * 32 for queue in QUEUES}
    for queue in reversed(QUEUES):
        broker.enqueue([request(ids[queue], queue)])

    # Then they are fetched most urgent first, and acked
    assert drain(broker, 3) == [ids[q] for q in QUEUES]
    with tls_cluster.client() as client:
        states = [client.hget(broker.keys(q).task(ids[q]), "state") for q in QUEUES]
    assert states == [b"completed"] * 3


@pytest.mark.parametrize("form", ["rediss", "rediss+sentinel", "rediss+cluster"])
def test_tls__a_closed_broker_reopens_its_connections_on_its_next_calls(
    form: str, tls_server: TLSProcess, certs: Certs, settings: Any, tmp_path: Path
) -> None:
    # Given a broker that enqueued and drained once, then closed its connections
    if form == "rediss+cluster":
        setup = ClusterSetup(tmp_path / "cluster", certs=certs)
        setup.start()
        url, stop = setup.url, setup.stop
    elif form == "rediss+sentinel":
        watch = f"sentinel monitor jobs 127.0.0.1 {tls_server.port} 1\n"
        sentinel = TLSProcess(tls_server.executable, tmp_path / "sentinel", watch, certs=certs)
        sentinel.start("--sentinel")
        url, stop = f"{form}://127.0.0.1:{sentinel.port}/jobs/0?{certs.query}", sentinel.stop
    else:
        url, stop = f"{form}://127.0.0.1:{tls_server.port}/0?{certs.query}", lambda: None
    try:
        broker = on(settings, url)
        broker.enqueue([request("1" * 32, "default")])
        assert drain(broker, 1) == ["1" * 32]
        broker.close()

        # Then its calls reopen them: enqueue, the idle wait, the ack, and a call with no key
        # (Redis' clock: on a Cluster, sent to its default node)
        broker.enqueue([request("2" * 32, "default")])
        assert drain(broker, 1) == ["2" * 32]
        assert abs(broker.time() - time.time()) < 60
    finally:
        stop()


@pytest.mark.parametrize("form", ["rediss", "rediss+cluster"])
def test_tls__a_server_the_given_cas_do_not_vouch_for_is_refused(
    form: str, tls_server: TLSProcess, certs: Certs, settings: Any
) -> None:
    # Given a URL without the test's CA: the system's CAs check the server's certificate
    query = certs.query.partition("&")[2]  # the client certificate only
    url = f"{form}://127.0.0.1:{tls_server.port}/0?{query}"

    # Then no call reaches it (a Cluster client asks for the slot map as it is made)
    with pytest.raises(BrokerUnavailable, match="certificate verify failed"):
        on(settings, url).enqueue([request("b" * 32, "default")])
    with tls_server.client() as client:
        assert client.dbsize() == 0
