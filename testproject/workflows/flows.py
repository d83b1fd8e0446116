"""Three worked examples of flows, each a story told as one function (docs/flows-admin.rst).

- `OrderTimeout`: create an order, wait up to 30 minutes for its payment (a signal from the
  payment webhook), cancel it unless paid.
- `Approval`: ask someone to approve, remind them once after a day, expire after two more;
  the decision is a signal (`decide()` sends it).
- `FanOutDownload`: download many URLs, at most `limit` at once, then build one report.

Everything that touches the database, the network, the clock or the mail is a step; the rest
is deterministic, so `manage.py flows check` is clean on this module.
"""

from __future__ import annotations

import hashlib
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from django.core.mail import send_mail

from django_jobs.flows import Context, Flow, send_signal
from testproject.workflows.models import ApprovalRequest, Order

# -- order timeout --------------------------------------------------------------------------


@dataclass
class OrderInput:
    cart: str
    total: int
    #: Seconds the customer has to pay (30 minutes).
    pay_within: float = 30 * 60


def create_order(cart: str, total: int) -> int:
    return Order.objects.create(cart=cart, total=total).pk


def mark_paid(order_id: int, payment: dict[str, Any]) -> str:
    Order.objects.filter(pk=order_id).update(
        status=Order.Status.PAID, payment_ref=str(payment.get("ref", ""))
    )
    return Order.Status.PAID


def cancel_unpaid(order_id: int) -> str:
    # Only an order still awaiting payment: a payment recorded meanwhile wins.
    Order.objects.filter(pk=order_id, status=Order.Status.AWAITING_PAYMENT).update(
        status=Order.Status.CANCELED
    )
    return str(Order.objects.get(pk=order_id).status)


class OrderTimeout(Flow[OrderInput]):
    """An order is canceled unless its payment (the signal "paid") comes within pay_within."""

    def run(self, ctx: Context, input: OrderInput) -> dict[str, Any]:
        order_id = ctx.step("create", create_order, input.cart, input.total)
        payment, paid = ctx.wait_for_signal("paid", timeout=input.pay_within)
        if paid:
            status = ctx.step("mark-paid", mark_paid, order_id, payment)
        else:
            status = ctx.step("cancel", cancel_unpaid, order_id)
        return {"order": order_id, "status": status}


# -- approval with a reminder and a timeout -------------------------------------------------


@dataclass
class ApprovalInput:
    subject: str
    approver: str
    #: Seconds before the one reminder (a day), then before the request expires (two days).
    remind_after: float = 24 * 3600
    expire_after: float = 48 * 3600


#: The decision's signal before the reminder, and after it: a wait that timed out never
#: takes its signal, so the second wait has a name of its own (decide() sends the right one).
DECISION = "decision"
DECISION_AFTER_REMINDER = "decision-after-reminder"


def ask(request_id: int) -> None:
    request = ApprovalRequest.objects.get(pk=request_id)
    send_mail(f"Please approve: {request.subject}", "Approve or reject it in the app.",
              None, [request.approver])  # fmt: skip


def remind(request_id: int) -> int:
    request = ApprovalRequest.objects.get(pk=request_id)
    request.reminders += 1
    request.save(update_fields=["reminders"])
    send_mail(f"Reminder: please approve {request.subject}", "It expires soon.", None,
              [request.approver])  # fmt: skip
    return request.reminders


def record_outcome(request_id: int, outcome: str) -> str:
    ApprovalRequest.objects.filter(pk=request_id).update(outcome=outcome)
    return outcome


def open_request(subject: str, approver: str) -> int:
    return ApprovalRequest.objects.create(subject=subject, approver=approver).pk


class Approval(Flow[ApprovalInput]):
    """Ask, remind once after remind_after, expire after expire_after more."""

    def run(self, ctx: Context, input: ApprovalInput) -> dict[str, Any]:
        request_id = ctx.step("open", open_request, input.subject, input.approver)
        ctx.step("ask", ask, request_id)
        decision, decided = ctx.wait_for_signal(DECISION, timeout=input.remind_after)
        if not decided:
            ctx.step("remind", remind, request_id)
            decision, decided = ctx.wait_for_signal(
                DECISION_AFTER_REMINDER, timeout=input.expire_after
            )
        outcome = ("approved" if decision.get("approved") else "rejected") if decided else "expired"
        ctx.step("record", record_outcome, request_id, outcome)
        return {"request": request_id, "outcome": outcome}


def decide(call_id: str, approved: bool, by: str = "") -> bool:
    """The approver's answer (from a view): True if the flow took it, False if it had expired
    or was decided already."""
    value = {"approved": approved, "by": by}
    return send_signal(call_id, DECISION, value) or send_signal(
        call_id, DECISION_AFTER_REMINDER, value
    )


# -- fan-out download with a limit ----------------------------------------------------------


@dataclass
class DownloadInput:
    urls: list[str] = field(default_factory=list)
    #: Downloads at once, at most.
    limit: int = 4
    timeout: float = 30.0


def download(url: str, timeout: float) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read()
    return {"url": url, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def build_report(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"files": len(results), "bytes": sum(r["bytes"] for r in results)}


class FanOutDownload(Flow[DownloadInput]):
    """Download every URL (each a step of its own, retried on its own), at most limit at
    once, then build one report from them all."""

    def run(self, ctx: Context, input: DownloadInput) -> dict[str, Any]:
        calls = [(download, url, input.timeout) for url in input.urls]
        results = ctx.parallel("download", calls, limit=input.limit, max_attempts=3)
        return ctx.step("report", build_report, results)
