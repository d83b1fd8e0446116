"""Mail leaves one way: through the queue, sent by the worker with the real backend.

- `QueuedEmailBackend`: the email backend (MAILERS on Django 6.1+, EMAIL_BACKEND before).
- `SendEmail` with `SendEmailPayload(to, template, data)`: a templated mail as a job.
- `DeliverEmail`: the job each queued message becomes.
"""

from django_jobs.mail import checks  # noqa: F401  (registers the mail checks)
from django_jobs.mail.backend import QueuedEmailBackend
from django_jobs.mail.delivery import DeliverEmail, EmailPayload, SendEmail, SendEmailPayload

__all__ = ["DeliverEmail", "EmailPayload", "QueuedEmailBackend", "SendEmail", "SendEmailPayload"]
