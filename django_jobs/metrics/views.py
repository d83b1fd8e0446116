"""The queue-wide metrics for a scraper: `django_jobs.metrics.views.metrics`.

Include `django_jobs.metrics.urls` (path "metrics") in the project's URLconf. Each scrape reads
every configured queue's depths in one round trip (`queue_infos`: counts, no key scan).

Who may read it: a staff user's session, or a scraper sending
``Authorization: Bearer <token>`` where the token is the Django setting JOBS_METRICS_TOKEN
(compared in constant time). Anyone else gets a 403; queue names and depths are not public.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from django_jobs.broker.factory import get_broker
from django_jobs.broker.shards import merged, shards_for
from django_jobs.exceptions import BrokerUnavailable, JobsDisabled
from django_jobs.metrics.worker import require

STATES = ("pending", "scheduled", "retry", "active", "dead", "completed", "canceled")


class QueuesCollector:
    """django_jobs_queue_tasks{queue,state} and django_jobs_queue_paused{queue}."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        broker = get_broker()
        # A sharded queue is one queue here: the sums over its shards (broker/shards.py).
        infos = merged(
            broker.queue_infos(shards_for(broker.settings).expand(broker.settings.served_queues))
        )
        tasks = GaugeMetricFamily(
            "django_jobs_queue_tasks", "Tasks in a queue, per state.", labels=["queue", "state"]
        )
        paused = GaugeMetricFamily(
            "django_jobs_queue_paused", "1 if the queue is paused.", labels=["queue"]
        )
        for info in infos:
            for state in STATES:
                tasks.add_metric([info.name, state], info.count(state))
            # Pending tasks waiting for a slot of their job type's concurrency_limit.
            tasks.add_metric([info.name, "parked"], info.parked)
            paused.add_metric([info.name], int(info.paused))
        yield tasks
        yield paused


def allowed(request: HttpRequest) -> bool:
    """A staff user's session, or the bearer token of JOBS_METRICS_TOKEN."""
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token: str | None = getattr(django_settings, "JOBS_METRICS_TOKEN", None)
    sent = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The queues' depths in Prometheus' text format."""
    p = require()
    if not allowed(request):
        return HttpResponse(
            "Forbidden: log in as a staff user, or send Authorization: Bearer <the "
            "JOBS_METRICS_TOKEN setting>.\n",
            status=403, content_type="text/plain",
        )  # fmt: skip
    registry = p.CollectorRegistry()
    registry.register(QueuesCollector())
    try:
        body = p.generate_latest(registry)
    except (BrokerUnavailable, JobsDisabled) as exc:  # the scrape fails: `up` says so
        return HttpResponse(f"{exc}\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=p.CONTENT_TYPE_LATEST)
