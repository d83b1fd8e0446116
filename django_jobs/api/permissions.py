"""Who may use the jobs admin API.

Every request needs an authenticated user, whatever the project configures, so anonymous
requests never get data. On top of that, the classes named by the Django setting
JOBS_API_PERMISSION_CLASSES must all grant access; by default that is IsAdminUser (staff users).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission, OperandHolder, SingleOperandHolder

#: What DRF accepts in permission_classes: a class, or classes combined with & | ~.
PermissionClass = type[BasePermission] | OperandHolder | SingleOperandHolder
#: Default of JOBS_API_PERMISSION_CLASSES: staff users only.
DEFAULT_PERMISSION_CLASSES: tuple[str, ...] = ("rest_framework.permissions.IsAdminUser",)


def permission_classes() -> list[PermissionClass]:
    """Return the classes JOBS_API_PERMISSION_CLASSES names (dotted paths or classes).

    Combinations such as `IsAdminUser | MyPermission` are accepted as DRF accepts them. Read on
    every request, so override_settings works in tests.
    """
    configured: Sequence[object] = getattr(
        settings, "JOBS_API_PERMISSION_CLASSES", DEFAULT_PERMISSION_CLASSES
    )
    if isinstance(configured, str) or not isinstance(configured, Sequence):
        raise ImproperlyConfigured(
            "JOBS_API_PERMISSION_CLASSES must be a list of permission classes or dotted paths "
            f"to them, got {configured!r}."
        )
    classes: list[PermissionClass] = []
    for entry in configured:
        try:
            cls = import_string(entry) if isinstance(entry, str) else entry
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"JOBS_API_PERMISSION_CLASSES names {entry!r}, which cannot be imported: {exc}"
            ) from exc
        if isinstance(cls, OperandHolder | SingleOperandHolder):
            classes.append(cls)
            continue
        if not (isinstance(cls, type) and issubclass(cls, BasePermission)):
            raise ImproperlyConfigured(
                f"JOBS_API_PERMISSION_CLASSES names {entry!r}, which is not a DRF permission "
                f"class (a subclass of rest_framework.permissions.BasePermission)."
            )
        classes.append(cls)
    return classes
