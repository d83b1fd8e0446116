"""`runworker --autoreload`: restart the worker on a code change, and stop it gracefully.

Django's own reloader (`autoreload.run_with_reloader`) does not fit a worker: it runs the
command on a thread, where no signal handler can be installed, so SIGTERM and Ctrl-C did not
stop the worker gracefully; its outer process exits on SIGTERM at once, SIGKILLing the worker
under it; and a code change ends the process however many tasks are running. Here:

- The outer process (`run_with_restarts`) runs the worker as a child process, in a process
  group of its own, and forwards each SIGTERM and SIGINT to it, once: Ctrl-C in a terminal is
  one signal to the worker, as without --autoreload. It starts the worker again when it exits
  with `RELOAD` (a code change) and exits with the worker's exit code otherwise. If the outer
  process dies, the worker gets SIGTERM (Linux) and stops gracefully.
- The worker process (`run_watched`) runs the supervisor on its main thread and Django's file
  watcher on a thread beside it. A code change asks the supervisor to stop, as SIGTERM does:
  running tasks finish within the shutdown timeout, the children exit, then the process exits
  with `RELOAD`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Any

from django.utils import autoreload

from django_jobs.worker.child import set_parent_death_signal
from django_jobs.worker.supervisor import Supervisor

logger = logging.getLogger("django_jobs.worker.reloader")

#: The exit code by which a worker process asks to be started again (Django's too).
RELOAD = 3


def is_watched_process() -> bool:
    """Whether this process is the worker under the outer --autoreload process."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


def run_with_restarts() -> int:
    """Run this command again as a watched child process until it exits other than RELOAD."""
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    args = autoreload.get_child_arguments()
    while True:
        process = subprocess.Popen(
            args,
            env=env,
            close_fds=False,
            # Ctrl-C reaches the terminal's process group: this process, not the worker.
            process_group=0,
            preexec_fn=lambda: set_parent_death_signal(signal.SIGTERM),
        )

        code = _wait_forwarding(process)
        if code != RELOAD:
            return code
        logger.info("code changed: starting the worker again")


def _wait_forwarding(process: subprocess.Popen[bytes]) -> int:
    """Wait for the worker process, passing it each SIGTERM and SIGINT this process gets."""

    def forward(signum: int, frame: FrameType | None) -> None:
        process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_watched(supervisor: Supervisor) -> int:
    """Run the supervisor on this (the main) thread until it stops; RELOAD after a code change."""
    changed: list[str] = []

    def on_change(sender: Any, file_path: Any, **kwargs: Any) -> bool:
        if not changed:
            changed.append(str(file_path))
        supervisor.request_stop(f"{file_path} changed", again_is_now=False)
        return True  # no reload from the watcher's thread: the supervisor stops first

    autoreload.file_changed.connect(on_change)
    reloader = autoreload.get_reloader()
    watcher = threading.Thread(
        target=reloader.run, args=(threading.main_thread(),), name="autoreload", daemon=True
    )
    watcher.start()
    try:
        code = supervisor.run()
    finally:
        autoreload.file_changed.disconnect(on_change)
        reloader.stop()
    if changed:
        logger.info("%s changed: worker stopped, restarting", changed[0])
        return RELOAD
    return code
