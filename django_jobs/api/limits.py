"""What one client may ask of the jobs admin API: how often, and how big a request.

- **Rate**: JOBS["API_THROTTLE_RATE"] requests per user ("600/minute" by default, None for
  none), a DRF throttle after the project's own (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES still
  apply). Its history lives in Django's default cache, as DRF's throttles keep theirs, under a
  key of the user (or the client's address, before sign-in) and the JOBS namespace, so that two
  projects on one cache do not share a budget. Past the rate: 429, with a Retry-After header.
  A request whose sign-in failed (a wrong token, or no credentials) never reaches the throttles
  (DRF refuses it first), so those are counted apart, at the same rate per client address
  (RefusedSignInThrottle), and an address past it is answered 429 before any sign-in is tried
  (no token lookup), until its window has room: guessing tokens or flooding without any is
  throttled too. The address is REMOTE_ADDR, or DRF's reading of X-Forwarded-For only when
  REST_FRAMEWORK["NUM_PROXIES"] says how many proxies to trust (a forged header gets no fresh
  budget). Its cache key holds a hash of it (any length fits any cache), and a cache that fails
  lets the request through to its 401/403 (logged), as if there were no throttle.
- **Body**: no endpoint takes more than MAX_BODY bytes (DATA_UPLOAD_MAX_MEMORY_SIZE if
  smaller); a longer Content-Length is answered 413 before the body is read or anyone signs in.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings as django_settings
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException, AuthenticationFailed, NotAuthenticated
from rest_framework.request import Request
from rest_framework.settings import api_settings
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

logger = logging.getLogger("django_jobs.api")

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

    def get_ident(self, request: Request) -> str:
        if api_settings.NUM_PROXIES is None:  # DRF would believe X-Forwarded-For whole
            return str(request.META.get("REMOTE_ADDR") or "")
        return str(super().get_ident(request))

    def get_cache_key(self, request: Request, view: APIView) -> str:
        ident = hashlib.sha256(self.get_ident(request).encode()).hexdigest()[:32]
        return f"throttle:{self.scope}:{get_settings().namespace}:{ident}"

    def over(self, request: Request, view: APIView) -> bool:
        """Whether the address has no room left in its window (nothing is recorded)."""
        if self.rate is None:
            return False
        most, duration = self.parse_rate(self.rate)
        self.key = self.get_cache_key(request, view)
        self.history = list(self.cache.get(self.key, []))
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - (duration or 0):
            self.history.pop()
        return most is not None and len(self.history) >= most


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
        refused = RefusedSignInThrottle()
        if _cache_works(lambda: refused.over(request, self), False):
            self.throttled(request, refused.wait() or 1.0)  # before a token is looked up
        try:
            super().initial(request, *args, **kwargs)
        except (AuthenticationFailed, NotAuthenticated):
            if not _cache_works(lambda: refused.allow_request(request, self), True):
                self.throttled(request, refused.wait() or 1.0)
            raise

    def get_throttles(self) -> list[BaseThrottle]:
        return [*super().get_throttles(), JobsRateThrottle()]


def _cache_works(read: Any, otherwise: bool) -> bool:
    """read(), or `otherwise` when the cache fails: the refused sign-ins' throttle fails open
    (the request goes on to its answer, 401/403 for a refused one), and says so in the log."""
    try:
        return bool(read())
    except Exception:  # any cache backend's error: down, a key it refuses, ...
        logger.warning("the jobs API's sign-in throttle cannot use the cache", exc_info=True)
        return otherwise
