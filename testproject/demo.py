"""Run the demo: migrate, then the web server with a worker beside it.

    python -m testproject.demo [PORT]

Uses REDIS_URL, or the local Redis at redis://127.0.0.1:6379/0 when it answers. Without Redis it
says so and runs in the no-Redis mode (jobs run inline in the web process).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import redis

LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def main() -> int:
    port = sys.argv[1] if len(sys.argv) > 1 else "8000"
    url = os.environ.get("REDIS_URL") or LOCAL_REDIS
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="testproject.settings")
    if redis_answers(url):
        env["REDIS_URL"] = url
        print(f"demo: jobs go through Redis at {url}")
    else:
        env.pop("REDIS_URL", None)
        print(f"demo: no Redis answers at {url}; running without Redis (jobs run inline).")
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "--verbosity", "0"], env=env, check=True)
    subprocess.run([*manage, "shell", "-v", "0", "-c", CREATE_ADMIN], env=env, check=True)
    print(second_terminal(env.get("REDIS_URL"), port), flush=True)
    worker = (
        subprocess.Popen([*manage, "runworker", "--autoreload", "--concurrency", "2"], env=env)
        if "REDIS_URL" in env
        else None
    )
    try:
        return subprocess.call([*manage, "runserver", port], env=env)
    except KeyboardInterrupt:
        return 0
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=60)


def second_terminal(redis_url: str | None, port: str) -> str:
    """What to type in a second terminal to reach this demo's Redis, database and server."""
    here = os.getcwd()
    redis_line = f"export REDIS_URL={redis_url}" if redis_url else "unset REDIS_URL"
    return (
        f"demo: the site at http://127.0.0.1:{port}/ (sign up at /signup/, the admin at /admin/)\n"
        "demo: in a second terminal, to reach the same Redis and database:\n"
        f"    cd {shlex.quote(here)}\n"
        f"    {redis_line}\n"
        "    .venv/bin/python manage.py shell      # or: manage.py runworker, manage.py check\n"
        "demo: stop with Ctrl-C"
    )


CREATE_ADMIN = """
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username="admin").exists():
    User.objects.create_superuser("admin", "admin@example.com", "admin")
print("demo: the admin user is admin, password admin")
"""

if __name__ == "__main__":
    sys.exit(main())
