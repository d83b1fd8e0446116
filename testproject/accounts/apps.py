from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "testproject.accounts"
    label = "accounts"
