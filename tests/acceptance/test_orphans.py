"""A worker's children die with it, and `--autoreload` stops as gracefully as a plain worker.

Found trying it (issue 12): `kill -9` of the supervisor left its children alive with parent 1,
fetching and running tasks; under `--autoreload` SIGTERM did not stop the worker gracefully
(and its children were orphaned). Processes are read from /proc.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testproject.probes.jobs import Sleep, Work
from tests.acceptance.conftest import Worker, done, probe, started
from tests.conftest import RedisNamespace, wait_until


def alive(pid: int) -> bool:
    """Whether pid is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every process under pid, at any depth."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:
            continue
        for child in map(int, children):
            out |= {child} | descendants(child)
    return out


@pytest.fixture
def leftovers() -> Iterator[set[int]]:
    """Pids a test saw; any still alive at the end are killed (a failed test leaves none)."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_runworker__kill_9_of_the_supervisor_leaves_no_child_and_no_run(
    worker: Worker, redis_ns: RedisNamespace, leftovers: set[int]
) -> None:
    # Given a worker with one busy child and two idle ones (blocked on Redis for work)
    Sleep.enqueue(Work("busy", seconds=30))
    worker.start("--concurrency", "3")
    started(redis_ns, "busy")
    children = wait_until(lambda: len(worker.children()) == 3 and set(worker.children()))
    leftovers |= children

    # When the supervisor is killed (an OOM kill, a runtime signalling PID 1 only), and work
    # arrives just after
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    worker.wait()
    Sleep.enqueue_many([Work(f"after{i}") for i in range(5)])

    # Then no process of that worker is left within a second...
    wait_until(lambda: not any(map(alive, children)), timeout=1.0)
    assert time.monotonic() - killed < 1.0
    # ...and none started a task (one blocked on Redis as it died may have fetched one: Redis
    # runs a dead client's pipelined fetch until it sees the socket closed; that task waits
    # out its lease, never run)
    tags = [tag.decode() for tag in redis_ns.client.hkeys(probe(redis_ns, "started"))]
    assert tags == ["busy"]
    assert done(redis_ns) == []
    queue = f"{redis_ns.namespace}:{{default}}"
    waiting = redis_ns.client.llen(f"{queue}:pending") + redis_ns.client.llen(f"{queue}:active")
    assert waiting == 5 + 1  # and the busy one


def test_runworker__autoreload_stops_gracefully_on_sigterm(
    worker: Worker, redis_ns: RedisNamespace, leftovers: set[int]
) -> None:
    # Given a worker under --autoreload (an outer process that restarts it) running a task
    Sleep.enqueue(Work("slow", seconds=1.5))
    worker.start("--autoreload", "--concurrency", "2")
    started(redis_ns, "slow")
    processes = wait_until(lambda: len(descendants(worker.pid)) == 3 and descendants(worker.pid))
    leftovers |= processes

    # When the outer process gets SIGTERM (what a process manager or `kill` sends)
    worker.signal(signal.SIGTERM)

    # Then the running task finishes, everything exits cleanly, and nothing is left behind
    assert worker.wait(timeout=20) == 0, worker.output()
    assert done(redis_ns) == ["slow:1:0"]
    assert not [pid for pid in processes if alive(pid)], worker.output()
    assert "finishing running tasks" in worker.output()


def test_runworker__autoreload_code_change_stops_children_gracefully_and_restarts(
    worker: Worker,
    redis_ns: RedisNamespace,
    leftovers: set[int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a worker under --autoreload running a task, with a module of this test's own to
    # change (Python imports sitecustomize at start-up from the path; the watcher watches it)
    module = tmp_path / "site" / "sitecustomize.py"
    module.parent.mkdir()
    module.write_text("")
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(module.parent), path])))
    Sleep.enqueue(Work("slow", seconds=1.5))
    worker.start("--autoreload", "--concurrency", "1")
    started(redis_ns, "slow")
    before = wait_until(lambda: len(descendants(worker.pid)) == 2 and descendants(worker.pid))
    leftovers |= before

    # When that module changes (its mtime; the watcher compares mtimes each second)
    def touched() -> bool:
        os.utime(module)
        return "changed: worker stopped, restarting" in worker.output()

    wait_until(touched, timeout=20, interval=0.5, why=worker.output)

    # Then the task finished (once), the old processes are gone, and a new worker takes work
    assert done(redis_ns) == ["slow:1:0"], worker.output()
    wait_until(lambda: not any(map(alive, before)), timeout=5, why=worker.output)
    Sleep.enqueue(Work("after"))
    wait_until(lambda: done(redis_ns) == ["slow:1:0", "after:1:0"], timeout=30, why=worker.output)
    leftovers |= descendants(worker.pid)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0, worker.output()
