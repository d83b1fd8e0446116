"""What the idempotency tests count: one row per effect a handler had (no unique key on purpose,
so an effect that happened twice shows as two rows)."""

from django.db import models


class Effect(models.Model):
    key = models.CharField(max_length=100)
    pid = models.IntegerField(default=0)

    def __str__(self) -> str:
        return self.key
