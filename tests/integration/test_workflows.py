"""The testproject's three worked examples of flows (testproject/workflows/flows.py), run in
this process on the real Redis and the test database, with short durations in place of the
30 minutes and the days (wait_until with a deadline, no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command

from django_jobs.conf import get_settings
from django_jobs.flows import Run, get_run, send_signal
from django_jobs.testing import run_burst
from testproject.workflows import flows
from testproject.workflows.flows import (
    Approval,
    ApprovalInput,
    DownloadInput,
    FanOutDownload,
    OrderInput,
    OrderTimeout,
    decide,
)
from testproject.workflows.models import ApprovalRequest, Order
from tests.conftest import RedisNamespace, wait_until

pytestmark = pytest.mark.django_db


def drain() -> None:
    run_burst(list(get_settings().flow_queues))


def run_of(call: str) -> Run:
    run = get_run(call)
    assert run is not None
    return run


def until(call: str, *statuses: str) -> Run:
    """Drain the flows' queues until the run is in one of statuses (a timer may be due)."""
    wait_until(lambda: drain() or run_of(call).status in statuses, timeout=10)
    return run_of(call)


# -- order timeout --------------------------------------------------------------------------


def test_order__paid_within_its_time_is_paid(redis_ns: RedisNamespace) -> None:
    call = OrderTimeout.start(OrderInput(cart="c-1", total=1999))
    drain()
    assert run_of(call).status == "waiting"
    (order,) = Order.objects.all()
    assert order.status == Order.Status.AWAITING_PAYMENT
    assert send_signal(call, "paid", {"ref": "pay-42"}) is True
    run = until(call, "succeeded")
    assert run.output == {"order": order.pk, "status": "paid"}
    order.refresh_from_db()
    assert (order.status, order.payment_ref) == (Order.Status.PAID, "pay-42")


def test_order__unpaid_at_its_deadline_is_canceled(redis_ns: RedisNamespace) -> None:
    call = OrderTimeout.start(OrderInput(cart="c-2", total=500, pay_within=0.2))
    run = until(call, "succeeded")
    assert run.output["status"] == "canceled"
    assert Order.objects.get().status == Order.Status.CANCELED
    assert send_signal(call, "paid", {"ref": "late"}) is False  # too late: refused for ever


# -- approval with a reminder and a timeout -------------------------------------------------


def test_approval__decided_before_the_reminder(redis_ns: RedisNamespace) -> None:
    call = Approval.start(ApprovalInput(subject="Budget", approver="boss@example.com"))
    drain()
    assert [m.subject for m in mail.outbox] == ["Please approve: Budget"]
    assert decide(call, approved=True, by="boss") is True
    run = until(call, "succeeded")
    assert run.output["outcome"] == "approved"
    assert ApprovalRequest.objects.get().reminders == 0
    assert decide(call, approved=False) is False  # decided already


def test_approval__reminded_once_then_decided(redis_ns: RedisNamespace) -> None:
    call = Approval.start(ApprovalInput("Trip", "boss@example.com", remind_after=0.2))
    run = until(call, "waiting")
    wait_until(lambda: drain() or run_of(call).step("remind") is not None, timeout=10)
    assert [m.subject for m in mail.outbox] == [
        "Please approve: Trip",
        "Reminder: please approve Trip",
    ]
    assert decide(call, approved=False) is True  # the first wait timed out: the second takes it
    run = until(call, "succeeded")
    assert run.output["outcome"] == "rejected"
    request = ApprovalRequest.objects.get()
    assert (request.reminders, request.outcome) == (1, "rejected")


def test_approval__expires_after_the_reminder(redis_ns: RedisNamespace) -> None:
    call = Approval.start(ApprovalInput("Old", "a@example.com", remind_after=0.1, expire_after=0.2))
    run = until(call, "succeeded")
    assert run.output["outcome"] == "expired"
    assert ApprovalRequest.objects.get().reminders == 1
    assert decide(call, approved=True) is False


# -- fan-out download with a limit ----------------------------------------------------------


class Files(BaseHTTPRequestHandler):
    """Serves /<n> as n bytes, counting the requests in flight (the peak is the limit seen)."""

    lock = threading.Lock()
    running = 0
    peak = 0
    gate = threading.Semaphore(0)

    def do_GET(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.running += 1
            cls.peak = max(cls.peak, cls.running)
        # Hold each request until as many are in flight as the flow may run, or 1 s passes: a
        # limit not kept shows as a peak above it, a kept one reaches it exactly.
        cls.gate.acquire(timeout=1.0)
        body = b"x" * int(self.path.strip("/"))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with cls.lock:
            cls.running -= 1

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Files.running = Files.peak = 0
    Files.gate = threading.Semaphore(0)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_download__every_file_at_most_limit_at_once_then_one_report(
    redis_ns: RedisNamespace, server: str
) -> None:
    limit, sizes = 3, list(range(1, 13))

    def release_when_full() -> None:
        # Let the held requests go as soon as `limit` of them are in flight.
        wait_until(lambda: Files.running >= limit or Files.peak >= limit, timeout=10)
        for _ in sizes:
            Files.gate.release()

    releaser = threading.Thread(target=release_when_full)
    releaser.start()
    call = FanOutDownload.start(DownloadInput([f"{server}/{n}" for n in sizes], limit=limit))
    run = until(call, "succeeded", "failed")
    releaser.join()
    assert run.status == "succeeded", run.error
    assert run.output == {"files": 12, "bytes": sum(sizes)}
    assert Files.peak == limit
    assert len([s for s in run.steps if s.kind == "item"]) == 12


# -- the lint -------------------------------------------------------------------------------


def test_examples__flows_check_is_clean() -> None:
    out = StringIO()
    call_command("flows", "check", str(Path(flows.__file__)), stdout=out)
    assert "nothing flagged" in out.getvalue()
