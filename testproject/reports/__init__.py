"""Django's tasks framework in the demo project: `@task` functions (tasks.py) that run on
`manage.py runworker` through django_jobs.tasks.JobsBackend (Django 6.0 and later)."""
