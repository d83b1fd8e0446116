"""Sign-up: create the account, log in, and send the welcome mail without making the user wait."""

from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from django_jobs import DuplicateJob
from testproject.accounts.jobs import SendWelcomeEmail, WelcomePayload


class SignupForm(UserCreationForm):
    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/home.html")


def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            user = form.save()
            try:
                SendWelcomeEmail.enqueue(
                    WelcomePayload(user_id=user.pk),
                    idempotency_key=f"welcome:{user.pk}",
                    on_commit=True,
                )
            except DuplicateJob:
                pass  # the original is already on its way
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("home")
    return render(request, "accounts/signup.html", {"form": form})
