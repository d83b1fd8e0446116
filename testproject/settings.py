"""Settings of the demo and test project, read from the environment with django-environ.

REDIS_URL     unset: jobs run inline and the cache is local memory; set: jobs go through Redis.
DATABASE_URL  default: SQLite next to this file (postgres://postgres@127.0.0.1:5432/test works).
SECRET_KEY, DEBUG, JOBS_NAMESPACE as usual.
"""

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = env("SECRET_KEY", default="django-insecure-demo-only-never-use-in-production")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_jobs",
    "testproject.accounts",
    "testproject.probes",
    "testproject.reports",
    "testproject.shop",
    "testproject.workflows",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL", default=None) or None

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env("JOBS_NAMESPACE", default="jobs") + ":cache",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

JOBS = {
    "REDIS_URL": REDIS_URL,
    "NAMESPACE": env("JOBS_NAMESPACE", default="jobs"),
    # Any other JOBS key as JSON, e.g. JOBS_EXTRA='{"LEASE": 3}' (the worker tests use it).
    **env.json("JOBS_EXTRA", default={}),
}

# Django's tasks framework (Django 6.0 on) runs its @task functions on our workers.
if django.VERSION >= (6, 0):
    TASKS = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend"}}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "django-jobs admin API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# Mail leaves through the queue (django_jobs.mail.QueuedEmailBackend): a view's send_mail()
# returns at once and the worker sends with the real backend, EMAIL_BACKEND from the
# environment (console by default; the SMTP backend uses EMAIL_HOST and EMAIL_PORT).
_EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
_SMTP = _EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend"
_EMAIL_HOST = env("EMAIL_HOST", default="localhost")
_EMAIL_PORT = env.int("EMAIL_PORT", default=25)
if django.VERSION >= (6, 1):
    MAILERS = {
        "default": {
            "BACKEND": "django_jobs.mail.QueuedEmailBackend",
            "OPTIONS": {"mailer": "send"},
        },
        "send": {
            "BACKEND": _EMAIL_BACKEND,
            "OPTIONS": {"host": _EMAIL_HOST, "port": _EMAIL_PORT} if _SMTP else {},
        },
    }
else:  # RemovedInDjango2028Warning: EMAIL_BACKEND gives way to MAILERS from Django 6.1 on.
    EMAIL_BACKEND = "django_jobs.mail.QueuedEmailBackend"
    JOBS["EMAIL_BACKEND"] = _EMAIL_BACKEND
    EMAIL_HOST, EMAIL_PORT = _EMAIL_HOST, _EMAIL_PORT
DEFAULT_FROM_EMAIL = "demo@example.com"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
LOGIN_REDIRECT_URL = "/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_jobs": {"handlers": ["console"], "level": env("JOBS_LOG_LEVEL", default="INFO")}
    },
}
