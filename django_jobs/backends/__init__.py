"""Where an enqueue goes without Redis: one small backend per mode, as Django's tasks framework
has them. Into Redis (REDIS_URL set) is the client's own `client.RedisBackend`, so that an
enqueue runs no code of this package; the outbox's fast path is given it.

- `inline.InlineBackend`: run now, in this process (REDIS_URL unset, WHEN_DISABLED "inline").
- `skip.SkipBackend`: log and drop (REDIS_URL unset, WHEN_DISABLED "skip").

The client validates and encodes every enqueue, then hands the backend `Submission`s; each
backend answers one `Accepted` per submission. `django_jobs.testing` adds a capturing backend.
"""
