"""URLs of the metrics view: ``path("jobs/", include("django_jobs.metrics.urls"))``."""

from django.urls import path

from django_jobs.metrics.views import metrics

app_name = "django_jobs_metrics"
urlpatterns = [path("metrics", metrics, name="metrics")]
