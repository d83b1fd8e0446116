"""What the example flows act on: orders (the order timeout) and approval requests."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order that is canceled unless paid within its time (flows.OrderTimeout)."""

    class Status(models.TextChoices):
        AWAITING_PAYMENT = "awaiting_payment"
        PAID = "paid"
        CANCELED = "canceled"

    cart = models.CharField(max_length=100)
    total = models.PositiveIntegerField(help_text="In cents.")
    status = models.CharField(max_length=20, choices=Status, default=Status.AWAITING_PAYMENT)
    payment_ref = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"


class ApprovalRequest(models.Model):
    """A request someone must approve or reject (flows.Approval); reminded once, then expired."""

    subject = models.CharField(max_length=200)
    approver = models.EmailField()
    reminders = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=20, blank=True, default="")

    def __str__(self) -> str:
        return f"approval {self.pk}: {self.subject}"
