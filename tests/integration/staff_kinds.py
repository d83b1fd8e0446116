"""Kinds of staff user by the jobs permissions they hold, and what each permission lets them do:
the one table that the admin's action matrix (test_admin_hostile.py) and the flows API's matrix
(test_api_flows.py) cross their actions with."""

from __future__ import annotations

#: Kinds of staff user by the permissions they hold.
STAFF_KINDS = {
    "none": (),
    "view": ("view_task",),
    "change": ("change_task",),
    "delete": ("delete_task",),
    "view+delete": ("view_task", "delete_task"),
    "all": ("view_task", "change_task", "delete_task"),
}
#: Who may: a look needs view_task (or change_task, which implies it), a change change_task, a
#: delete delete_task.
GRANTS = {
    "view": {"view_task", "change_task"},
    "change": {"change_task"},
    "delete": {"delete_task"},
}


def allowed(needs: str, kind: str) -> bool:
    """Whether a staff user of `kind` may do an action that `needs` "view", "change" or
    "delete"."""
    return bool(GRANTS[needs] & set(STAFF_KINDS[kind]))
