"""With REDIS_URL unset the project imports, migrates and serves without touching the network."""

import socket
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[Any]:
    """Record (and refuse) every TCP or Unix socket connection made during the test."""
    settings.JOBS = {"REDIS_URL": None}
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise ConnectionRefusedError(f"test forbids connecting to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


@pytest.mark.django_db(transaction=True)
def test_no_redis__migrate_and_serve_without_network(network_attempts: list[Any]) -> None:
    call_command("migrate", verbosity=0)
    client = Client()

    signup = client.post(
        "/signup/",
        {"username": "ada", "password1": "a-long-pass-phrase", "password2": "a-long-pass-phrase"},
    )
    home = client.get("/")
    admin = client.get("/admin/login/")

    assert signup.status_code == 302
    assert get_user_model().objects.filter(username="ada").exists()
    assert b"Welcome, ada" in home.content
    assert admin.status_code == 200
    assert network_attempts == []
