"""Sign-up: create the account, log in, and send the welcome mail without making the user wait.

The mail is an ordinary send_mail(): the project's mail goes through the queued backend
(settings.py), so the request only enqueues it, after the account's transaction commits, and
the worker sends it.
"""

from django.contrib.auth import login
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import UserCreationForm
from django.core.mail import send_mail
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render


class SignupForm(UserCreationForm):
    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/home.html")


def send_welcome_mail(user: AbstractBaseUser, address: str) -> None:
    send_mail(
        "Welcome to the django-jobs demo",
        f"Hello {user.get_username()}, this mail was sent by a worker, not by your request.",
        None,
        [address],
    )


def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            user = form.save()
            address = form.cleaned_data["email"]
            if address:
                # Queued when the account exists for good: a rollback sends nothing.
                transaction.on_commit(lambda: send_welcome_mail(user, address))
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("home")
    return render(request, "accounts/signup.html", {"form": form})
