"""The project's commands, run as a user runs them: in a subprocess."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(
    *args: str, settings_dir: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    environ["DATABASE_URL"] = "sqlite:///:memory:"
    environ.update(env)
    if settings_dir is not None:
        environ["PYTHONPATH"] = os.pathsep.join([str(settings_dir), str(ROOT)])
        environ["DJANGO_SETTINGS_MODULE"] = "broken_settings"
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("jobs", "check_id", "hint"),
    [
        ('{"REDIS_URL": "http://127.0.0.1:6379"}', "django_jobs.E003", "redis://host:port/db"),
        ('{"QUEUES": []}', "django_jobs.E005", "priority order"),
        ('{"TIMEOUT": -1}', "django_jobs.E006", "number of seconds"),
    ],
)
def test_check__broken_jobs_setting_prints_id_and_hint(
    tmp_path: Path, jobs: str, check_id: str, hint: str
) -> None:
    (tmp_path / "broken_settings.py").write_text(
        f"from testproject.settings import *\nJOBS = {jobs}\n"
    )

    result = manage("check", settings_dir=tmp_path)

    assert result.returncode == 1
    assert check_id in result.stderr
    assert "HINT:" in result.stderr
    assert hint in result.stderr
    assert "Traceback" not in result.stderr


def test_runworker__without_redis_explains_and_exits_0() -> None:
    result = manage("runworker")

    assert result.returncode == 0, result.stderr
    assert "Jobs are disabled" in result.stdout
    assert "REDIS_URL=redis://" in result.stdout


def test_migrate__without_redis_succeeds() -> None:
    result = manage("migrate", "--noinput")

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
