"""Without prometheus_client the app runs; asking for metrics says to install the extra."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError

from django_jobs.management.commands.runworker import Command
from django_jobs.metrics import hook, worker


def test_metrics_without_prometheus_client_say_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    with pytest.raises(ImproperlyConfigured, match=r"django-redis-jobs\[prometheus\]"):
        worker.start(0, lambda: 0, 1)
    assert hook.recorder is None


def test_runworker_metrics_port_without_prometheus_client_is_a_command_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    command = Command()
    with pytest.raises(CommandError, match=r"\[prometheus\]"):
        command.serve_metrics(_FakeSupervisor(), 0)  # type: ignore[arg-type]


class _FakeSupervisor:
    concurrency = 1
    per_child = 1
    table = None
