"""Rules on top of the jobs permissions: JOBS_API_PERMISSION_CLASSES only adds requirements.

With any setting, lenient or strict, a user gets no more than the admin's permissions allow
(test_api_permissions.py checks those permissions endpoint by endpoint); views say what each
handler needs, and a handler they forgot is refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory, force_authenticate
from rest_framework.views import APIView

from django_jobs.api.views import JobsAPIView
from tests.conftest import RedisNamespace
from tests.integration.test_api import BASE, EVERY_PERMISSION
from tests.integration.test_api_permissions import KIND, Kind, contents, seed


class OnCall(BasePermission):
    """A project's own rule: members of the "on-call" group only."""

    message = "Only the on-call group may use the jobs API."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.user.groups.filter(name="on-call").exists()


#: Users the admin refuses some or all of the jobs to.
LENIENT_KINDS = [
    "active non-staff with every permission",
    "staff with none",
    "staff with view_task",
]
LENIENT_SETTINGS = [
    ["rest_framework.permissions.AllowAny"],
    ["rest_framework.permissions.IsAuthenticated"],
    ["rest_framework.permissions.IsAdminUser"],
    [],
]


@pytest.mark.parametrize("setting", LENIENT_SETTINGS)
@pytest.mark.parametrize(
    "kind",
    [KIND[name] for name in LENIENT_KINDS],
    ids=lambda k: k.name,
)
def test_permission_classes__a_lenient_setting_keeps_the_model_permissions(
    db: None, redis_ns: RedisNamespace, settings: Any, setting: list[str], kind: Kind
) -> None:
    settings.JOBS_API_PERMISSION_CLASSES = setting
    client = kind.client()
    seeded = seed(paused=False)
    before = contents(redis_ns)

    read = client.get(f"{BASE}/{seeded.api_task}")
    changes = [
        client.delete(f"{BASE}/{seeded.api_task}").status_code,
        client.post(f"{BASE}/queues/default/pause").status_code,
        client.delete(f"{BASE}/queues/default/dead").status_code,
    ]

    assert read.status_code == (200 if kind.name == "staff with view_task" else 403)
    assert changes == [403, 403, 403]
    assert contents(redis_ns) == before


def test_permission_classes__the_setting_adds_requirements_and_lifts_none(
    db: None, redis_ns: RedisNamespace, settings: Any
) -> None:
    settings.JOBS_API_PERMISSION_CLASSES = [f"{__name__}.OnCall"]
    # The project's rule alone would let both on-call users in, and refuse the superuser.
    root = KIND["superuser"].client()
    clerk = KIND["staff with none"].client(groups=("on-call",))
    operator = KIND["staff with change_task"].client(groups=("on-call",))
    seeded = seed(paused=False)
    before = contents(redis_ns)

    refused = [
        root.get(f"{BASE}/{seeded.api_task}"),
        root.delete(f"{BASE}/{seeded.api_task}"),
        clerk.get(f"{BASE}/{seeded.api_task}"),
        clerk.post(f"{BASE}/queues/default/pause"),
        operator.delete(f"{BASE}/{seeded.api_task}"),
    ]
    unchanged = contents(redis_ns) == before
    paused = operator.post(f"{BASE}/queues/default/pause")

    assert [response.status_code for response in refused] == [403] * 5
    assert refused[0].json() == {"detail": OnCall.message}
    assert "django_jobs.view_task" in refused[2].json()["detail"]
    assert unchanged
    assert paused.status_code == 200
    assert paused.json()["paused"] is True


class Forgetful(JobsAPIView):
    """A view whose post handler is missing from `needs`."""

    needs = {"get": "view"}

    def get(self, request: Request) -> Response:
        return Response({})

    def post(self, request: Request) -> Response:
        return Response({})


def test_permissions__a_handler_missing_from_needs_is_refused(db: None) -> None:
    root = User.objects.create_superuser("root")
    requests = [APIRequestFactory().get("/"), APIRequestFactory().post("/")]
    for request in requests:
        force_authenticate(request, root)

    read, change = (Forgetful.as_view()(request) for request in requests)

    assert read.status_code == 200
    assert change.status_code == 403
    assert "Forgetful does not declare the permission POST needs" in change.data["detail"]


def test_permission_classes__denial_message_names_the_permission(
    db: None, redis_ns: RedisNamespace
) -> None:
    client = Kind("viewer", perms=("view_task",)).client()
    seeded = seed(paused=False)

    deleted = client.delete(f"{BASE}/{seeded.api_task}")
    paused = client.post(f"{BASE}/queues/default/pause")
    stranger = Kind("outsider", staff=False, perms=EVERY_PERMISSION).client()
    read = stranger.get(BASE)

    assert "django_jobs.delete_task" in deleted.json()["detail"]
    assert "django_jobs.change_task" in paused.json()["detail"]
    assert "staff" in read.json()["detail"]
