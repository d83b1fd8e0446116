"""A view that sends the full probe mail: with the queued backend it returns without SMTP."""

from django.http import HttpRequest, HttpResponse

from testproject.probes.mail import full_message


def send_probe_mail(request: HttpRequest) -> HttpResponse:
    sent = full_message().send()
    return HttpResponse(f"queued {sent}", content_type="text/plain")
