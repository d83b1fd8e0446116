"""URLs of the jobs admin API; include them without a trailing slash on the prefix::

    path("api/v1/admin/jobs", include("django_jobs.api.urls"))

which serves /api/v1/admin/jobs, /api/v1/admin/jobs/failed, /api/v1/admin/jobs/<id>,
/api/v1/admin/jobs/schedules and so on.
"""

from django.urls import include, path

from django_jobs.api import schedules, views

app_name = "django_jobs_api"

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
    # Before the task routes, whose <str:task_id> would take "schedules".
    path("schedules", schedules.ScheduleListView.as_view(), name="schedules"),
    path("schedules/<str:name>", schedules.ScheduleView.as_view(), name="schedule"),
    path("schedules/<str:name>/run", schedules.ScheduleRunView.as_view(), name="schedule-run"),
    path(
        "schedules/<str:name>/pause",
        schedules.SchedulePauseView.as_view(),
        name="schedule-pause",
    ),
    path(
        "schedules/<str:name>/resume",
        schedules.ScheduleResumeView.as_view(),
        name="schedule-resume",
    ),
    path("<str:task_id>", views.TaskView.as_view(), name="task"),
    path("<str:task_id>/retry", views.TaskRetryView.as_view(), name="task-retry"),
]

urlpatterns = [
    path("", views.OverviewView.as_view(), name="overview"),
    path("/", include(below)),
]
