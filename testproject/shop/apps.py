from django.apps import AppConfig


class ShopConfig(AppConfig):
    """The flows the tests and the bench run (flows.py, discovered like jobs.py)."""

    name = "testproject.shop"
    label = "shop"
