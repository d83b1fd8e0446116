"""URLs of the demo project: the admin, the sign-up page and the jobs admin API."""

from django.contrib import admin
from django.urls import path

from testproject.accounts import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("signup/", views.signup, name="signup"),
    path("", views.home, name="home"),
]
