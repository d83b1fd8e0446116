from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    """Three worked examples of flows (flows.py): docs/flows-admin.rst walks through them."""

    name = "testproject.workflows"
    label = "workflows"
