"""URLs of the demo project: the admin, the sign-up page and the jobs admin API."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from testproject.accounts import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("signup/", views.signup, name="signup"),
    path("api/v1/admin/jobs", include("django_jobs.api.urls")),
    path("api/v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("", views.home, name="home"),
]
