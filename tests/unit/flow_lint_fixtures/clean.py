"""A flow that keeps the replay rule: the same calls, each inside a step (never run)."""

# ruff: noqa
from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from functools import partial

import requests
from django.contrib.auth.models import User
from django.utils import timezone

from django_jobs.flows import Context, Flow


@dataclass
class In:
    n: int = 1


def fetch(url: str) -> int:
    return requests.get(url).status_code


class Clean(Flow[In]):
    def run(self, ctx: Context, input: In) -> object:
        now = ctx.now()
        a = ctx.step("now", lambda: timezone.now().isoformat())
        b = ctx.step("draw", random.random)
        c = ctx.step("id", lambda: uuid.uuid4().hex)

        def save_user() -> int:
            user = User(username="x")
            user.save()
            return User.objects.count()

        d = ctx.step("user", save_user)
        calls = [(lambda i=i: time.time() + i) for i in range(input.n)]
        e = ctx.parallel("times", calls, limit=2)
        f = ctx.parallel(
            "pages", [partial(fetch, "https://example.com"), lambda: requests.head("x")]
        )
        ctx.sleep("later", 60)
        return [now, a, b, c, d, e, f]


class NotAFlow:
    def run(self, ctx: object, input: object) -> float:
        return time.time()  # not a Flow: not checked
