"""Sign-up: create the account, log in, and send the welcome mail without making the user wait.

The mail is an ordinary send_mail(): the project's mail goes through the queued backend
(settings.py), so the request only enqueues it and the worker sends it. The enqueue goes through
the transactional outbox (`use_outbox()`): the mail's job is a row written in the account's own
transaction, so a rollback sends nothing, and with Redis down the sign-up still works: the
account is created, the page says the mail will follow, and a worker sends it once Redis is back.
"""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import UserCreationForm
from django.core.mail import send_mail
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from django_jobs.client import use_outbox


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
        # The account and its mail's job commit together (the outbox): no job without the
        # account, no account without its job, whether Redis answers now or later.
        with transaction.atomic(), use_outbox():
            user = form.save()
            address = form.cleaned_data["email"]
            if address:
                send_welcome_mail(user, address)
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        if address:
            messages.info(request, f"Your welcome mail to {address} will follow in a moment.")
        return redirect("home")
    return render(request, "accounts/signup.html", {"form": form})
