"""`python -m tests.chaos --profile short|long [--only 1,3a] [--keep]`: run the battery."""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--profile", choices=("short", "long"), default="short")
    parser.add_argument("--only", help="comma-separated scenario keys or numbers (1,3a,8)")
    parser.add_argument("--seed", type=int, help="random seed (default: printed, random)")
    parser.add_argument("--keep", action="store_true", help="keep the logs directory")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("TEST_REDIS_URL")
        or os.environ.get("REDIS_URL")
        or DEFAULT_REDIS_URL,
        help="the shared Redis (only the run's own namespaces are touched)",
    )
    return parser.parse_args(argv)


def setup_django(tmp: Path, redis_url: str) -> None:
    """Configure the battery's own process: it enqueues, it never runs a job."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="testproject.settings",
        REDIS_URL=redis_url,
        JOBS_NAMESPACE="chaos-battery",
        JOBS_EXTRA="{}",
        JOBS_LOG_LEVEL="WARNING",
        DATABASE_URL=f"sqlite:///{tmp / 'battery.sqlite3'}",
    )
    import django

    django.setup()


def main(argv: list[str]) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    tmp = Path(tempfile.mkdtemp(prefix="chaos-"))
    setup_django(tmp, args.redis_url)

    from tests.chaos.harness import Run
    from tests.chaos.processes import ChaosError
    from tests.chaos.profiles import PROFILES
    from tests.chaos.report import Result, table
    from tests.chaos.scenarios import SCENARIOS

    profile = PROFILES[args.profile]
    only = set(args.only.split(",")) if args.only else None

    def wanted(key: str) -> bool:
        """Named by --only (by key or number), or else not left out by the profile."""
        if only is None:
            return key not in profile.skip
        return key in only or key.rstrip("abcde") in only

    chosen = [s for s in SCENARIOS if wanted(s[0])]
    print(f"chaos battery: profile {profile.name}, seed {seed}, logs in {tmp}", flush=True)
    run = Run(args.redis_url, tmp, seed)
    results = []
    began = time.monotonic()
    try:
        for _key, title, scenario in chosen:
            result = Result(title)
            started = time.monotonic()
            print(f"-- {title}", flush=True)
            try:
                scenario(run, profile, result)
            except ChaosError as exc:
                result.problems.append(str(exc))
            except Exception:
                result.problems.append(traceback.format_exc().strip().replace("\n", "\n    "))
            result.seconds = time.monotonic() - started
            print(f"   {'pass' if result.passed else 'FAIL'} in {result.seconds:.0f}s", flush=True)
            results.append(result)
    finally:
        run.cleanup()
    print()
    print(table(results))
    print(f"\nprofile {profile.name}, seed {seed}, {time.monotonic() - began:.0f}s in all")
    if args.keep or not all(r.passed for r in results):
        print(f"logs kept in {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if results and all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
