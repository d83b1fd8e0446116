"""What one client may ask of the jobs admin API: how often, and how big a request.

- **Rate**: JOBS["API_THROTTLE_RATE"] requests per user ("600/minute" by default, None for
  none), a DRF throttle after the project's own (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES still
  apply). Its history lives in Django's default cache, as DRF's throttles keep theirs, under a
  key of the user (or the client's address, before sign-in) and the JOBS namespace, so that two
  projects on one cache do not share a budget. Past the rate: 429, with a Retry-After header.
  A request whose sign-in failed (a wrong token, or no credentials) never reaches the throttles
  (DRF refuses it first), so those are counted apart, at the same rate per client address
  (RefusedSignInThrottle): guessing tokens or flooding without any is throttled too.
- **Body**: no endpoint takes more than MAX_BODY bytes (DATA_UPLOAD_MAX_MEMORY_SIZE if
  smaller); a longer Content-Length is answered 413 before the body is read or anyone signs in.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException, AuthenticationFailed, NotAuthenticated
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle
from rest_framework.views import APIView

from django_jobs.api.serializers import ErrorSerializer
from django_jobs.conf import get_settings

__all__ = [
    "MAX_BODY",
    "RESPONSES",
    "JobsRateThrottle",
    "Limited",
    "RefusedSignInThrottle",
    "TooLarge",
]

#: Most bytes of a request body the API reads (a flow's signal value is the largest there is).
MAX_BODY = 1024 * 1024


#: The answers of these limits, in every endpoint's schema.
RESPONSES = {
    413: OpenApiResponse(ErrorSerializer, "The request body is larger than the API reads."),
    429: OpenApiResponse(
        ErrorSerializer, "Throttled (JOBS['API_THROTTLE_RATE']): retry after Retry-After seconds."
    ),
}


class TooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class JobsRateThrottle(SimpleRateThrottle):
    """JOBS["API_THROTTLE_RATE"] requests per user (see the module)."""

    scope = "django_jobs"

    def get_rate(self) -> str | None:
        return get_settings().api_throttle_rate

    def get_cache_key(self, request: Request, view: APIView) -> str:
        user = request.user
        ident = user.pk if user and user.is_authenticated else self.get_ident(request)
        return f"throttle_{self.scope}_{get_settings().namespace}_{ident}"


class RefusedSignInThrottle(JobsRateThrottle):
    """The same rate per client address, for requests whose sign-in failed (see the module):
    keyed by the address alone, never by request.user (reading it would sign in again)."""

    scope = "django_jobs_refused"

    def get_cache_key(self, request: Request, view: APIView) -> str:
        return f"throttle_{self.scope}_{get_settings().namespace}_{self.get_ident(request)}"


class Limited(APIView):
    """An API view refusing large bodies first, and throttled by JobsRateThrottle."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        limit = min(MAX_BODY, django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE or MAX_BODY)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            raise TooLarge(
                f"The request body is {length:,} bytes; the jobs API reads {limit:,} at most."
            )
        try:
            super().initial(request, *args, **kwargs)
        except (AuthenticationFailed, NotAuthenticated):
            refused = RefusedSignInThrottle()
            if not refused.allow_request(request, self):
                self.throttled(request, refused.wait() or 1.0)
            raise

    def get_throttles(self) -> list[BaseThrottle]:
        return [*super().get_throttles(), JobsRateThrottle()]
