"""The jobs admin API: Django REST framework views over the Inspector.

Mount it in the project's URLconf, without a trailing slash::

    path("api/v1/admin/jobs", include("django_jobs.api.urls"))

Errors of the jobs layer become HTTP errors here and nowhere else: JobsDisabled and
BrokerUnavailable are 503, an unknown task or queue is 404, a task in the wrong state is 409.
"""
