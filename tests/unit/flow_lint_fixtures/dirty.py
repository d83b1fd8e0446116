"""A flow that breaks the replay rule once per rule of `manage.py flows check` (never run).

Each flagged line ends with a comment naming the rule the lint must report for it.
"""

# ruff: noqa
from __future__ import annotations

import datetime
import random
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime as dt
from random import choice

import httpx
import requests
from django.contrib.auth.models import User
from django.utils import timezone

from django_jobs.flows import Context, Flow


@dataclass
class In:
    n: int = 1


class Dirty(Flow[In]):  # not registered at import: this module is only parsed
    def run(self, ctx: Context, input: In) -> object:
        a = timezone.now()  # clock
        b = datetime.datetime.now()  # clock
        c = dt.utcnow()  # clock
        d = time.time()  # clock
        e = random.random()  # random
        f = choice([1, 2])  # random
        g = uuid.uuid4()  # uuid
        h = User.objects.filter(pk=1).first()  # orm
        user = User(username="x")
        user.save()  # orm
        user.delete()  # orm
        i = requests.get("https://example.com")  # http
        j = httpx.post("https://example.com")  # http
        k = urllib.request.urlopen("https://example.com")  # http
        # An argument of ctx.step is evaluated by the replay, outside the step:
        ctx.step("late", print, time.time())  # clock
        return [a, b, c, d, e, f, g, h, i, j, k]
