"""Where an enqueue goes: one small backend per mode, as Django's tasks framework has them.

- `redis.RedisBackend`: into Redis, for the workers (REDIS_URL set).
- `inline.InlineBackend`: run now, in this process (REDIS_URL unset, WHEN_DISABLED "inline").
- `skip.SkipBackend`: log and drop (REDIS_URL unset, WHEN_DISABLED "skip").

The client validates and encodes every enqueue, then hands the backend `Submission`s; each
backend answers one `Accepted` per submission. `django_jobs.testing` adds a capturing backend.
"""
