"""URLs of the demo project: the admin, the sign-up page, the jobs admin API, a mail probe."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from django_jobs.api.urls import unknown_path
from testproject.accounts import views
from testproject.probes.views import send_probe_mail

urlpatterns = [
    path("admin/", admin.site.urls),
    path("signup/", views.signup, name="signup"),
    path("probes/mail/", send_probe_mail, name="probe-mail"),
    path("api/v1/admin/jobs", include("django_jobs.api.urls")),
    path("api/v1/admin/flows", include("django_jobs.api.flow_urls")),
    # Any other path under the API's prefix: a JSON 404, not Django's HTML page.
    re_path(r"^api/v1/admin/", unknown_path),
    path("api/v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("", views.home, name="home"),
]
