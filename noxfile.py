"""Every check CI runs: `make test` calls `nox` with no arguments, which runs them all."""

from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

nox.options.sessions = ["lint", "docs", "package", "tests", "cluster", "chaos", "bench"]
nox.options.error_on_missing_interpreters = True
nox.options.reuse_existing_virtualenvs = True

POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"
#: uv (make test's venv backend) writes no bytecode when it installs, and this machine sets
#: PYTHONDONTWRITEBYTECODE=1, so nothing ever wrote any: every process of a session (each pytest
#: worker, each runworker or manage.py a test starts) compiled Django, redis-py, hypothesis...
#: from source. Importing django_jobs' worker after django.setup() took 3.5 s instead of 1.0 s,
#: collecting the suite 28.5 s instead of 10.9 s. Installs compile it (a few seconds per venv).
INSTALL_ENV = {"UV_COMPILE_BYTECODE": "1"}


def bytecode_env(session: nox.Session) -> dict[str, str | None]:
    """The environment in which a session's processes cache the bytecode of this checkout's own
    modules (django_jobs, tests, testproject; pytest's rewritten test modules too) in the
    session's venv, never beside the sources: collecting the suite took 12.4 s without that
    cache, 7.0 s with it. (Not session.create_tmp(): it would move the tests' TMPDIR too.)"""
    return {
        "PYTHONDONTWRITEBYTECODE": None,
        "PYTHONPYCACHEPREFIX": str(Path(session.virtualenv.location) / "pycache"),
    }


#: Acceptance tests of the worker process itself (kill, pause, outage, reload, schedules across
#: workers). Their workers always use a SQLite file of their own, whatever the leg's database,
#: and most prove the worker's logic on Redis, the same on every Python and Django: they all run
#: on the newest leg (py312-newest-postgres), only OLDEST_WORKER_TESTS on the oldest, none on the
#: two middle legs (they would repeat them exactly, and they are most of a leg's time).
WORKER_PROCESS_TESTS = [
    "tests/acceptance/test_worker.py",
    "tests/acceptance/test_outage.py",
    "tests/acceptance/test_lease_lost.py",
    "tests/acceptance/test_orphans.py",
    "tests/acceptance/test_stale_runs.py",
    "tests/acceptance/test_schedules_workers.py",
    "tests/acceptance/test_flows_worker.py",
    "tests/acceptance/test_flows_atomic_worker.py",
    "tests/acceptance/test_outbox_workers.py",
    "tests/acceptance/test_django_tasks_worker.py",
    "tests/acceptance/test_upgrade_worker.py",
    "tests/acceptance/test_metrics_worker.py",
    "tests/acceptance/test_tracing_worker.py",
    "tests/acceptance/test_sentinel_failover.py",
    "tests/acceptance/test_sentinel_kill.py",
    "tests/acceptance/test_sensitive_worker.py",
    "tests/acceptance/test_async_worker.py",
    "tests/acceptance/test_cancel_worker.py",
    "tests/acceptance/test_limits_worker.py",
]
#: Worker-process tests that also run on the Django 6.0 leg (Django's tasks framework end to
#: end on 6.0 as well as on the newest; about 5 s).
DJANGO60_WORKER_TESTS = ["tests/acceptance/test_django_tasks_worker.py"]
#: Worker-process tests that also run on the oldest leg (py311-django52-sqlite), those whose
#: behaviour hangs on the Python or the Django version: the core worker (fork, signals, the
#: alarm's JobTimeout raised into a handler: LeaseLost and JobCanceled come by the same signal
#: path, so test_lease_lost and test_cancel_worker stay on the newest), Redis outages (socket
#: errors and reconnects), the async child (asyncio and Django's async ORM) and an atomic step
#: (Django's transactions). Django's tasks framework is not in Django 5.2 (skipped there).
#: The others (limits, schedules, flows, outbox, orphans, Sentinel, metrics, tracing...) are
#: Redis-side logic on the same code path: newest only.
OLDEST_WORKER_TESTS = [
    "tests/acceptance/test_worker.py",
    "tests/acceptance/test_outage.py",
    "tests/acceptance/test_async_worker.py",
    "tests/acceptance/test_flows_atomic_worker.py",
    "tests/acceptance/test_cancel_worker.py",
]


@nox.session(python="3.12")
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, mypy --strict and lint-imports on django_jobs/ (the
    layers and the no-circles contracts in pyproject.toml's [tool.importlinter])."""
    session.install("-e", ".[dev]", env=INSTALL_ENV)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "--strict", "django_jobs")
    session.run("lint-imports", "--no-cache")


@nox.session(python="3.12")
def docs(session: nox.Session) -> None:
    """Build the documentation with warnings as errors."""
    session.install("-e", ".[dev]", env=INSTALL_ENV)
    session.run(
        "sphinx-build", "-W", "--keep-going", "-q", "-b", "html", "docs", "docs/_build/html"
    )


@nox.session(python="3.12")
def package(session: nox.Session) -> None:
    """Build the sdist and wheel of django-redis-jobs; `twine check` them; the wheel must hold
    every file of django_jobs/ and import in a clean venv."""
    session.install("build", "uv", "twine", env=INSTALL_ENV)
    dist = Path(session.create_tmp()) / "dist"
    for old in dist.glob("*"):
        old.unlink()
    session.run("python", "-m", "build", "--installer", "uv", "--outdir", str(dist))
    session.run("twine", "check", "--strict", *(str(p) for p in sorted(dist.glob("*"))))
    (wheel,) = dist.glob("django_redis_jobs-*.whl")
    session.run("python", ".ci/check_wheel.py", str(wheel))
    session.install(str(wheel), env=INSTALL_ENV)
    session.run("python", "-c", "import django_jobs.broker.scripts as s; assert s.SOURCES")


@nox.session
@nox.parametrize(
    ("python", "django", "db", "worker_tests", "database_only"),
    [
        ("3.12", "django>=6", "postgres", WORKER_PROCESS_TESTS, False),
        # The same Python and Django as the leg above: only what can differ, the tests that can
        # touch the database (tests/conftest.py, JOBS_TESTS_DATABASE_ONLY).
        ("3.12", "django>=6", "sqlite", [], True),
        ("3.12", "django~=6.0.0", "sqlite", DJANGO60_WORKER_TESTS, False),
        ("3.11", "django~=5.2.0", "sqlite", OLDEST_WORKER_TESTS, False),
    ],
    ids=[
        "py312-newest-postgres",
        "py312-newest-sqlite",
        "py312-django60-sqlite",
        "py311-django52-sqlite",
    ],
)
def tests(
    session: nox.Session, django: str, db: str, worker_tests: list[str], database_only: bool
) -> None:
    """The pytest suite against the real Redis and the chosen database, with the leg's share of
    WORKER_PROCESS_TESTS (and, with database_only, only the tests that can touch the database)."""
    session.install("-e", ".[dev]", django, env=INSTALL_ENV)
    env = {
        "DATABASE_URL": POSTGRES_URL if db == "postgres" else "sqlite:///:memory:",
        **bytecode_env(session),
    }
    if database_only:
        env["JOBS_TESTS_DATABASE_ONLY"] = "1"
    session.run("python", "-c", "import django; print('Django', django.get_version())")
    leave_out = [f"--ignore={p}" for p in WORKER_PROCESS_TESTS if p not in worker_tests]
    # 4 pytest workers on 2 cores: the legs mostly wait (leases, heartbeats, subprocess
    # start-up), they do not compute. postgres leg: 269 CPU-s in 400 s with -n 2, 309 CPU-s in
    # 271 s with -n 4; newest-sqlite (database only): 98 s -> 79 s (measured beside other runs).
    # --maxschedchunk 1: tests are handed out one at a time, in the order tests/conftest.py
    # sets (the process-starting tests first), so no worker is left with a queue of long tests
    # while the others are idle.
    schedule = ["-n", "4", "--maxschedchunk", "1"]
    session.run("pytest", *schedule, *leave_out, *session.posargs, env=env)


#: The broker and worker tests that run once more on a Redis Cluster (the `cluster` session):
#: enqueue, fetch in priority order, ack, retry, dead, lease recovery, idempotency, schedules,
#: the read side, the slot audit and the fetch's round trips; then tests/cluster_leg (real
#: workers: priority across nodes, the idle wait, a slot moved while they drain).
CLUSTER_TESTS = [
    "tests/integration/test_broker.py",
    "tests/integration/test_processor.py",
    "tests/integration/test_idempotency.py",
    "tests/integration/test_idempotency_scope.py",
    "tests/integration/test_scheduler.py",
    "tests/integration/test_sweepers.py",
    "tests/integration/test_heartbeat.py",
    "tests/integration/test_enqueue.py",
    "tests/integration/test_scripts_atomic.py",
    "tests/integration/test_scripts_flow.py",
    "tests/integration/test_inspector.py",
    "tests/integration/test_cluster_slots.py",
    "tests/integration/test_fetch_rounds.py",
    "tests/integration/test_fetch_handback.py",
    "tests/integration/test_fetch_first_round.py",
    "tests/integration/test_replay_safety.py",
    "tests/integration/test_shards.py",
    "tests/integration/test_shards_limits.py",
    "tests/integration/test_shards_schedules.py",
    "tests/integration/test_shards_tasks.py",
    "tests/integration/test_shards_views.py",
    "tests/integration/test_shards_logs.py",
    "tests/cluster_leg",
]


@nox.session(python="3.12")
def cluster(session: nox.Session) -> None:
    """The Cluster leg: CLUSTER_TESTS against a Redis Cluster of 3 masters with a replica each,
    which `python -m tests.cluster` starts on free ports and stops (redis-server and redis-cli
    on PATH). About a minute and a half on the CI machine (1 min 26 s measured, 335 tests)."""
    session.install("-e", ".[dev]", env=INSTALL_ENV)
    env = {"DATABASE_URL": "sqlite:///:memory:", **bytecode_env(session)}
    args = ["-n", "2", "-m", "not slow_seed", *CLUSTER_TESTS, *session.posargs]
    session.run("python", "-m", "tests.cluster", *args, env=env)


@nox.session(python="3.12")
def chaos(session: nox.Session) -> None:
    """The reliability battery, short profile (tests/chaos): real workers, faults, a checker.

    Needs the Redis of the tests and redis-server on PATH (it starts servers of its own).
    """
    session.install("-e", ".[dev]", env=INSTALL_ENV)
    args = ["--profile", "short", *session.posargs]
    session.run("python", "-m", "tests.chaos", *args, env=bytecode_env(session))


@nox.session(python="3.12")
def bench(session: nox.Session) -> None:
    """The benchmark beside Celery, RQ, Dramatiq, Huey and arq, as a one-minute smoke run.

    The peers go into .bench-venv/<peer>/ from PyPI, never into this session's venv; the
    harness starts a redis-server of its own. `nox -s bench -- --runs 3` etc. pass options on.
    """
    session.install("-e", ".", "uv", env=INSTALL_ENV)
    session.run("python", "-m", "bench", "--quick", *session.posargs)
