from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "testproject.probes"
    label = "probes"
