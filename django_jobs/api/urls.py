"""URLs of the jobs admin API; include them without a trailing slash on the prefix::

    path("api/v1/admin/jobs", include("django_jobs.api.urls"))

which serves /api/v1/admin/jobs, /api/v1/admin/jobs/failed, /api/v1/admin/jobs/<id>,
/api/v1/admin/jobs/schedules and so on. After it, in the project's URLs::

    re_path(r"^api/v1/admin/", unknown_path)

makes a path with a trailing slash answer as without it, and any other path under the prefix a
JSON 404 instead of Django's HTML page. (It is not one of `urlpatterns`, which are exactly the
endpoints.)
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, include, path, resolve
from django.views.decorators.csrf import csrf_exempt

from django_jobs.api import cancel, schedules, views

app_name = "django_jobs_api"


@csrf_exempt  # the endpoint it hands over to checks CSRF itself (DRF's session auth)
def unknown_path(request: HttpRequest, rest: str = "") -> HttpResponse:
    """A path under the API's prefix that is none of its endpoints: with a trailing slash it
    answers as without it; anything else is a JSON 404 (never Django's HTML page)."""
    path_info = request.path_info
    if path_info.endswith("/") and path_info.strip("/"):
        try:
            match = resolve(path_info.rstrip("/"))
        except Resolver404:
            match = None
        if match is not None and match.func is not unknown_path:
            response: HttpResponse = match.func(request, *match.args, **match.kwargs)
            return response
    detail = (
        f"No endpoint at {request.path}. The endpoints are listed in the API's schema "
        f"(OpenAPI); paths have no trailing slash."
    )
    return JsonResponse({"detail": detail, "code": "not_found"}, status=404)


# Under "/", so that the overview answers at the include's prefix itself, without a slash.
below = [
    path("failed", views.FailedListView.as_view(), name="failed"),
    path("tasks", views.TaskListView.as_view(), name="tasks"),
    path("queues/<str:queue>/pause", views.QueuePauseView.as_view(), name="queue-pause"),
    path("queues/<str:queue>/resume", views.QueueResumeView.as_view(), name="queue-resume"),
    path("queues/<str:queue>/dead", views.QueueDeadView.as_view(), name="queue-dead"),
    path(
        "queues/<str:queue>/dead/retry",
        views.QueueDeadRetryView.as_view(),
        name="queue-dead-retry",
    ),
    # Before the task routes, whose <str:task_id> would take "schedules". <path:>: a schedule's
    # name may hold "/" (one a URL cannot tell from an action's is refused, E028); the actions
    # first, so that ".../run" is never read as a schedule's name.
    path("schedules", schedules.ScheduleListView.as_view(), name="schedules"),
    path("schedules/<path:name>/run", schedules.ScheduleRunView.as_view(), name="schedule-run"),
    path(
        "schedules/<path:name>/pause",
        schedules.SchedulePauseView.as_view(),
        name="schedule-pause",
    ),
    path(
        "schedules/<path:name>/resume",
        schedules.ScheduleResumeView.as_view(),
        name="schedule-resume",
    ),
    path("schedules/<path:name>", schedules.ScheduleView.as_view(), name="schedule"),
    path("<str:task_id>", views.TaskView.as_view(), name="task"),
    path("<str:task_id>/retry", views.TaskRetryView.as_view(), name="task-retry"),
    path("<str:task_id>/cancel", cancel.TaskCancelView.as_view(), name="task-cancel"),
]

urlpatterns = [
    path("", views.OverviewView.as_view(), name="overview"),
    path("/", include(below)),
]
