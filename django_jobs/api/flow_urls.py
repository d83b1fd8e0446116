"""URLs of the jobs admin API's flows endpoints; include them without a trailing slash::

    path("api/v1/admin/flows", include("django_jobs.api.flow_urls"))

which serves /api/v1/admin/flows, /api/v1/admin/flows/<call_id>, .../cancel and .../signal
(api/flows.py), beside the jobs endpoints (django_jobs.api.urls) and before the `unknown_path`
line, which then answers a trailing slash as without it here too.
"""

from django.urls import include, path

from django_jobs.api import flows

app_name = "django_jobs_flows_api"

below = [
    path("<str:call_id>", flows.FlowView.as_view(), name="flow"),
    path("<str:call_id>/cancel", flows.FlowCancelView.as_view(), name="flow-cancel"),
    path("<str:call_id>/signal", flows.FlowSignalView.as_view(), name="flow-signal"),
]

urlpatterns = [
    path("", flows.FlowListView.as_view(), name="flows"),
    path("/", include(below)),
]
