"""Flow classes: their input type, their registered name, and the check of two under one name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from django_jobs.checks import check_flows
from django_jobs.flows import Flow, registry


@dataclass
class In:
    x: int = 0


def test_registry__two_classes_under_one_name_is_e042_and_the_first_keeps_it() -> None:
    class First(Flow[In]):
        name = "tests.Same"

    class Second(Flow[In]):
        name = "tests.Same"

    try:
        assert registry.get("tests.Same") is First
        (message,) = check_flows()
        assert message.id == "django_jobs.E042"
        assert "First" in message.msg
        assert "Second" in message.msg
    finally:
        registry.flows.pop("tests.Same", None)
        registry.conflicts.pop("tests.Same", None)
    assert check_flows() == []


def test_flow__input_must_be_a_dataclass() -> None:
    with pytest.raises(TypeError, match="is not a dataclass"):

        class Bad(Flow[int]):  # type: ignore[type-var]
            pass


def test_flow__default_name_is_app_label_and_class() -> None:
    from testproject.shop.flows import StepsFlow

    assert StepsFlow.name == "shop.StepsFlow"
    assert registry.get("shop.StepsFlow") is StepsFlow
