"""What a cell of the API permission matrix (test_api_permissions.py) is made of: the kinds of
user it crosses, the state each cell starts from (`seed`), the whole namespace to compare
(`contents`), and each change's effect read back through the inspector.

The API acts on queue "default" and the admin on queue "low" (Seeded); each on its own schedule
(`schedule_of`, SCHEDULES).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from rest_framework.test import APIClient

from django_jobs.inspector import Inspector, get_inspector
from django_jobs.keys import State
from django_jobs.testing import run_burst
from tests.conftest import RedisNamespace
from tests.integration.test_api import EVERY_PERMISSION, Fails, Noop, Note
from tests.redis_state import snapshot

# -- users ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A kind of user: how the test makes one."""

    name: str
    anonymous: bool = False
    staff: bool = True
    active: bool = True
    superuser: bool = False
    perms: tuple[str, ...] = ()
    #: Grant perms through a group rather than to the user.
    group: bool = False

    def client(self, groups: tuple[str, ...] = ()) -> APIClient:
        """A client signed in as a new user of this kind (one client for admin and API).

        `groups`: names of more groups (no permissions given) to put the user in.
        """
        client = APIClient()
        if self.anonymous:
            return client
        user = User.objects.create_user(
            self.name.replace(" ", "-"),
            is_staff=self.staff,
            is_active=self.active,
            is_superuser=self.superuser,
        )
        perms = Permission.objects.filter(
            content_type__app_label="django_jobs", codename__in=self.perms
        )
        assert perms.count() == len(self.perms)
        if self.group:
            group = Group.objects.create(name=f"{user.username}-group")
            group.permissions.set(perms)
            user.groups.add(group)
        else:
            user.user_permissions.set(perms)
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        client.force_login(user)
        return client


KINDS = [
    Kind("anonymous", anonymous=True),
    Kind("active non-staff with every permission", staff=False, perms=EVERY_PERMISSION, group=True),
    Kind("inactive staff with every permission", active=False, perms=EVERY_PERMISSION),
    Kind("staff with none"),
    Kind("staff with view_task", perms=("view_task",)),
    Kind("staff with change_task", perms=("change_task",), group=True),
    Kind("staff with delete_task only", perms=("delete_task",)),
    Kind("superuser", superuser=True),
]
KIND = {kind.name: kind for kind in KINDS}


# -- what each cell starts from -------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """A dead task for the API (queue "default") and one for the admin (queue "low")."""

    api_task: str
    admin_task: str

    def task(self, queue: str) -> str:
        return self.api_task if queue == "default" else self.admin_task


def schedule_of(queue: str) -> str:
    """The schedule each side acts on: one per queue, enqueueing on it."""
    return f"{queue}-sync"


SCHEDULES = {
    schedule_of(queue): {"job": Noop.name, "every": 60, "payload": {"text": queue}, "queue": queue}
    for queue in ("default", "low")
}


def seed(paused: bool, waiting: bool = False) -> Seeded:
    """A dead task on each side; with `waiting`, a scheduled one instead (to cancel)."""
    if waiting:
        seeded = Seeded(
            api_task=Noop.enqueue(Note("api"), queue="default", delay=3600).id,
            admin_task=Noop.enqueue(Note("admin"), queue="low", delay=3600).id,
        )
    else:
        seeded = Seeded(
            api_task=Fails.enqueue(Note("api"), queue="default").id,
            admin_task=Fails.enqueue(Note("admin"), queue="low").id,
        )
        run_burst(["default", "low"])
    inspector = get_inspector()
    for queue in ("default", "low"):
        info = inspector.task(queue, seeded.task(queue))
        assert info is not None
        assert info.state == (State.SCHEDULED if waiting else State.DEAD)
        if paused:
            inspector.pause(queue)
            inspector.pause_schedule(schedule_of(queue))
    return seeded


def contents(redis_ns: RedisNamespace) -> dict[str, tuple[Any, ...]]:
    """Every key of the namespace with its type and content, and whether it expires.

    Not the TTL itself: a day counter's TTL in whole seconds ticks down during a cell, and a
    slow cell (the first on a worker) would see it change with nothing written. Times are read
    against a fixed clock (epoch 0), not Redis' now: a scheduled task an hour away would come
    nearer by the length of a slow cell (more than SLACK on a loaded machine) with nothing
    written.
    """
    return {key: (*value[:2], len(value) > 2) for key, value in snapshot(redis_ns, now=0.0).items()}


def state_of(insp: Inspector, queue: str, task_id: str) -> str | None:
    info = insp.task(queue, task_id)
    return info.state if info is not None else None


def queue_info(insp: Inspector, queue: str) -> Any:
    return next(info for info in insp.queues() if info.name == queue)


# The effect of each change, on one queue: True once it happened.


def task_deleted(insp: Inspector, queue: str, task_id: str) -> bool:
    return state_of(insp, queue, task_id) is None


def task_retried(insp: Inspector, queue: str, task_id: str) -> bool:
    return state_of(insp, queue, task_id) == State.PENDING


def task_canceled(insp: Inspector, queue: str, task_id: str) -> bool:
    return state_of(insp, queue, task_id) == State.CANCELED


def queue_paused(insp: Inspector, queue: str, task_id: str) -> bool:
    return bool(queue_info(insp, queue).paused)


def queue_resumed(insp: Inspector, queue: str, task_id: str) -> bool:
    return not queue_info(insp, queue).paused


def dead_deleted(insp: Inspector, queue: str, task_id: str) -> bool:
    info = queue_info(insp, queue)
    return bool(info.dead == 0 and state_of(insp, queue, task_id) is None)


def dead_retried(insp: Inspector, queue: str, task_id: str) -> bool:
    info = queue_info(insp, queue)
    return bool(info.dead == 0 and state_of(insp, queue, task_id) == State.PENDING)


def schedule_ran(insp: Inspector, queue: str, task_id: str) -> bool:
    info = insp.schedule(schedule_of(queue))
    return info.last_task_id is not None and state_of(insp, queue, info.last_task_id) == "pending"


def schedule_paused(insp: Inspector, queue: str, task_id: str) -> bool:
    return insp.schedule(schedule_of(queue)).paused


def schedule_resumed(insp: Inspector, queue: str, task_id: str) -> bool:
    return not insp.schedule(schedule_of(queue)).paused
