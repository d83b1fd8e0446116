from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from django.test import override_settings

from django_jobs import Job, UnknownJob
from django_jobs.checks import check_jobs
from django_jobs.jobs import Registry, registry

T = TypeVar("T")


@dataclass(frozen=True)
class Empty:
    pass


@pytest.fixture
def clean_registry() -> Iterator[Registry]:
    """Let a test register job classes without leaving them behind."""
    jobs, conflicts = dict(registry.jobs), dict(registry.conflicts)
    yield registry
    registry.jobs, registry.conflicts = jobs, conflicts


def test_job__registered_under_module_path_outside_installed_apps(clean_registry: Registry) -> None:
    class Local(Job[Empty]):
        pass

    assert Local.payload_type is Empty
    assert Local.name.startswith(f"{__name__}.test_job__registered_under")
    assert Local.name.endswith(".<locals>.Local")
    assert registry.get(Local.name) is Local


def test_job__name_can_be_set_and_generic_bases_are_not_registered(
    clean_registry: Registry,
) -> None:
    class Base(Job[T]):
        queue = "low"

    class Concrete(Base[Empty]):
        name = "billing.Charge"

    assert "billing.Charge" in registry.jobs
    assert Base not in registry.jobs.values()
    assert Concrete.queue == "low"


def test_job__payload_type_must_be_a_dataclass(clean_registry: Registry) -> None:
    with pytest.raises(TypeError, match="is not a dataclass"):

        class Bad(Job[dict[str, Any]]):  # type: ignore[type-var, unused-ignore]
            pass


def test_registry__unknown_name_raises_with_advice() -> None:
    with pytest.raises(UnknownJob, match="is this worker's code up to date"):
        registry.get("nowhere.Missing")


def test_check_jobs__two_classes_with_one_name_is_e011(clean_registry: Registry) -> None:
    class First(Job[Empty]):
        name = "same.Name"

    class Second(Job[Empty]):
        name = "same.Name"

    (error,) = check_jobs()

    assert error.id == "django_jobs.E011"
    assert "First" in error.msg
    assert "Second" in error.msg
    assert registry.get("same.Name") is First


def test_check_jobs__invalid_class_defaults_are_e012(clean_registry: Registry) -> None:
    class Urgent(Job[Empty]):
        queue = "urgent"
        max_attempts = 0

    with override_settings(JOBS={}):
        messages = check_jobs()

    assert [m.id for m in messages] == ["django_jobs.E012", "django_jobs.E012"]
    assert "queue 'urgent'" in messages[0].msg
    assert "max_attempts 0" in messages[1].msg


def test_check_jobs__project_jobs_pass() -> None:
    assert check_jobs() == []
