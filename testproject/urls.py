"""URLs of the demo project: the admin, the sign-up page, the jobs admin API, a mail probe."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from testproject.accounts import views
from testproject.probes.views import send_probe_mail

urlpatterns = [
    path("admin/", admin.site.urls),
    path("signup/", views.signup, name="signup"),
    path("probes/mail/", send_probe_mail, name="probe-mail"),
    path("api/v1/admin/jobs", include("django_jobs.api.urls")),
    path("api/v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("", views.home, name="home"),
]
