"""Who changed what through the jobs API: one line per change asked (a POST or a DELETE), on
the `django_jobs.audit` logger (the admin's changes log there too): the method, the path, the
user and the status answered, a refusal (403, 409, 429) included."""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response

from django_jobs.api.limits import Limited

audit = logging.getLogger("django_jobs.audit")


class Audited(Limited):
    """The API's views: bounded (Limited), and every change said on the audit logger."""

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        answer: Response = super().finalize_response(request, response, *args, **kwargs)
        if request.method not in SAFE_METHODS:
            who = request.user.get_username() if request.user else ""
            audit.info("API %s %r by %r: %s", request.method, request.path, who,
                       answer.status_code)  # fmt: skip
        return answer
