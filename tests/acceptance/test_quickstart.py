"""docs/quickstart.rst, followed literally: a new project built from the page's own code blocks.

Every code block of the page is applied in order. A Python block's caption names the file it is
(or, with "(add at the end)", what it is appended to); a console block's commands run in the
directory the page is in. Where a command cannot run unattended in a test, it is mapped to its
unattended twin, and only those: `pip install` is checked against our distribution's name (the
package is installed already), `createsuperuser` runs with `--noinput`, `export REDIS_URL=...`
points at a Redis of the test's own, `runworker` runs in the background until the test sends it
the Ctrl-C a user would, and `runserver` is replaced by Django's test client on the same URLs.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import RedisServer, wait_until

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.rst"
APPEND = " (add at the end)"


@dataclass(frozen=True)
class Block:
    language: str
    caption: str
    text: str


def blocks(page: str) -> list[Block]:
    """The page's code blocks, in order, dedented."""
    out = []
    lines = page.splitlines()
    for index, line in enumerate(lines):
        match = re.fullmatch(r"\.\. code-block:: (\w+)", line.strip())
        if not match:
            continue
        body = index + 1
        caption = ""
        while body < len(lines) and lines[body].strip().startswith(":"):
            option = lines[body].strip()
            if option.startswith(":caption:"):
                caption = option.removeprefix(":caption:").strip()
            body += 1
        code: list[str] = []
        for text in lines[body:]:
            if text.strip() and not text.startswith("   "):
                break
            code.append(text[3:])
        out.append(Block(match.group(1), caption, "\n".join(code).strip("\n") + "\n"))
    return out


class Project:
    """The reader's terminal: a directory, an environment, and what they typed."""

    def __init__(self, root: Path, redis: RedisServer) -> None:
        self.cwd = root
        self.redis = redis
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "JOBS_"))}
        self.env.pop("DATABASE_URL", None)
        self.env.pop("DJANGO_SETTINGS_MODULE", None)
        self.env.update(
            DJANGO_SUPERUSER_USERNAME="admin",
            DJANGO_SUPERUSER_EMAIL="admin@example.com",
            DJANGO_SUPERUSER_PASSWORD="admin",
        )
        self.worker: subprocess.Popen[str] | None = None
        self.worker_log = root / "worker.log"

    def run(self, command: str) -> None:
        words = shlex.split(command)
        if words[:2] == ["pip", "install"]:
            name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
            assert words[2:] == [name], f"the page installs {words[2:]}, the package is {name}"
        elif words[0] == "cd":
            self.cwd = self.cwd / words[1]
        elif words[0] == "export":
            key, _, _value = words[1].partition("=")
            assert key == "REDIS_URL", command
            self.env[key] = self.redis.url  # the test's own server, not the reader's
        elif words[0] == "django-admin":
            self.check([sys.executable, "-m", "django", *words[1:]])
        elif words[:3] == ["python", "manage.py", "createsuperuser"]:
            self.check([sys.executable, *words[1:], "--noinput"])
        elif words[:3] == ["python", "manage.py", "runworker"]:
            with self.worker_log.open("w") as out:
                self.worker = subprocess.Popen(
                    [sys.executable, *words[1:]], cwd=self.cwd, env=self.env, text=True,
                    stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
        elif words[:3] == ["python", "manage.py", "runserver"]:
            pass  # the test client stands in for the server and the browser (see browse)
        elif words[0] == "python":
            self.check([sys.executable, *words[1:]])
        else:
            pytest.fail(f"the quickstart runs a command this test does not know: {command}")

    def check(self, argv: list[str]) -> str:
        done = subprocess.run(
            argv, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{shlex.join(argv)} failed:\n{done.stdout}{done.stderr}"
        return done.stdout

    def browse(self, path: str) -> tuple[int, str]:
        """GET path as the superuser, through the project's own URLs and settings."""
        script = (
            "import django; django.setup()\n"
            "from django.test.utils import setup_test_environment; setup_test_environment()\n"
            "from django.contrib.auth import get_user_model\n"
            "from django.test import Client\n"
            "client = Client()\n"
            "client.force_login(get_user_model().objects.get(username='admin'))\n"
            f"response = client.get({path!r})\n"
            "print(response.status_code); print(response.content.decode())\n"
        )
        env = {**self.env, "DJANGO_SETTINGS_MODULE": "mysite.settings"}
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=self.cwd, env=env, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, f"GET {path} failed:\n{done.stdout}{done.stderr}"
        status, _, body = done.stdout.partition("\n")
        return int(status), body

    def worker_output(self) -> str:
        return self.worker_log.read_text(errors="replace")


def follow(project: Project, page: list[Block]) -> None:
    for block in page:
        if block.language == "console":
            for line in block.text.splitlines():
                if line.startswith("$ "):
                    project.run(line[2:])
        elif block.language == "python":
            assert block.caption, f"a Python block without a file caption:\n{block.text}"
            name = block.caption.removesuffix(APPEND)
            path = project.cwd / name
            if block.caption.endswith(APPEND):
                assert path.exists(), f"the page adds to {name}, which does not exist yet"
                path.write_text(path.read_text() + "\n" + block.text)
            else:
                path.write_text(block.text)


@pytest.mark.private_redis
def test_quickstart__runs_as_written(private_redis: RedisServer, tmp_path: Path) -> None:
    page = blocks(PAGE.read_text())
    assert any(b.caption == "shop/jobs.py" for b in page), "the page's blocks were not found"
    project = Project(tmp_path, private_redis)

    follow(project, page)

    worker = project.worker
    assert worker is not None, "the page never starts a worker"
    try:
        status, body = project.browse("/welcome/")
        assert (status, body.strip()) == (200, "Welcome! A message is on its way.")
        wait_until(
            lambda: "completed" in project.worker_output(),
            timeout=30,
            why=project.worker_output,
        )
        assert "Welcome, admin! (job " in project.worker_output()

        status, body = project.browse("/api/v1/admin/jobs")
        assert status == 200, body
        assert '"critical"' in body  # the overview lists the queues

        status, body = project.browse("/admin/django_jobs/task/")
        assert status == 200, body

        # The first failure a newcomer meets: Redis down at enqueue. The view answers.
        private_redis.stop()
        status, body = project.browse("/welcome/")
        assert (status, body.strip()) == (503, "Welcome! Your welcome message is delayed.")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGINT)  # the reader's Ctrl-C
        code = worker.wait(timeout=30)
    assert code == 0, project.worker_output()
