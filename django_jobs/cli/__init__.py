"""`manage.py jobs`: the queues from a terminal, over the Inspector like the admin and the API.

- `registry`: what a subcommand is (its arguments and its one function) and the session it runs
  in (the streams, `--json`, `--yes`).
- `render`: tables, times and JSON, as every subcommand prints them.
- `confirm` and `progress`: the prompt of destructive subcommands and the bars of bulk ones.
- `reading` (stats, ls, show, schedules) and `acting` (retry, delete, cancel, pause, resume,
  purge): the subcommands themselves.

Nothing here talks to Redis: every read and change goes through `django_jobs.inspector`.
"""
