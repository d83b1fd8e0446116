"""Who may use the jobs admin API: whom the admin would let do the same.

Every request passes three checks, in this order:

1. `IsAuthenticated`: anonymous requests never get data (401 or 403, as DRF decides).
2. `JobsModelPermissions`, always: an active staff user (the admin's own rule, AdminSite.
   has_permission) holding the Task permission the endpoint needs, as the admin's JobsAdmin
   decides: `django_jobs.view_task` (or change_task) to read, `django_jobs.change_task` to retry,
   cancel, pause and resume (queues and schedules) and run a schedule now,
   `django_jobs.delete_task` to delete. Superusers hold every permission, and permissions
   granted through a group count.
3. The classes named by the Django setting JOBS_API_PERMISSION_CLASSES (none by default): they
   can only add requirements, never lift the two above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission, OperandHolder, SingleOperandHolder

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView

#: What DRF accepts in permission_classes: a class, or classes combined with & | ~.
PermissionClass = type[BasePermission] | OperandHolder | SingleOperandHolder
#: Default of JOBS_API_PERMISSION_CLASSES: nothing on top of the model permissions.
DEFAULT_PERMISSION_CLASSES: tuple[str, ...] = ()

#: What a request does to the jobs, and so which permission it needs.
Action = Literal["view", "change", "delete"]
VIEW_TASK = "django_jobs.view_task"
CHANGE_TASK = "django_jobs.change_task"
DELETE_TASK = "django_jobs.delete_task"
#: The permissions of which one grants each action (the admin's has_view_permission also
#: accepts change_task).
GRANTS: dict[Action, tuple[str, ...]] = {
    "view": (VIEW_TASK, CHANGE_TASK),
    "change": (CHANGE_TASK,),
    "delete": (DELETE_TASK,),
}
#: The action in words, for the 403's message.
DOING: dict[Action, str] = {
    "view": "see queues, tasks, workers and schedules",
    "change": "retry or cancel tasks, pause or resume queues and schedules, run schedules now",
    "delete": "delete tasks",
}


def required_action(view: APIView, method: str) -> Action | None:
    """Return what a request with this method does at this view; None if the view never said.

    A view declares `needs`, its handlers' actions by method name. HEAD reads like GET; OPTIONS
    (a description of the endpoint) and methods the view does not handle (405 follows) need the
    view permission. A handler the view forgot to declare is refused rather than guessed at.
    """
    name = method.lower()
    needs: Mapping[str, Action] = getattr(view, "needs", {})
    if name == "head":
        name = "get"
    if name in needs:
        return needs[name]
    if name == "options" or not hasattr(view, name):
        return "view"
    return None


class JobsModelPermissions(BasePermission):
    """An active staff user with the Task permission the endpoint needs (see the module)."""

    message = "You do not have permission to perform this action."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if not (user.is_active and user.is_staff):
            self.message = (
                "Only active staff users may use the jobs API, as only they may use the admin; "
                "ask an administrator to mark your account as staff."
            )
            return False
        method = request.method or ""
        action = required_action(view, method)
        if action is None:
            self.message = (
                f"{type(view).__name__} does not declare the permission {method} needs, so it "
                f"is refused: add it to the view's `needs`."
            )
            return False
        grants = GRANTS[action]
        if any(user.has_perm(perm) for perm in grants):
            return True
        self.message = (
            f"You need the {' or '.join(grants)} permission to {DOING[action]}: ask an "
            f"administrator to grant it (to you or to one of your groups)."
        )
        return False


def permission_classes() -> list[PermissionClass]:
    """Return the classes JOBS_API_PERMISSION_CLASSES names (dotted paths or classes).

    These come on top of IsAuthenticated and JobsModelPermissions, which every view applies
    first whatever the setting says. Combinations such as `IsAdminUser | MyPermission` are
    accepted as DRF accepts them. Read on every request, so override_settings works in tests.
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
