"""`runworker --async-concurrency N` end to end: async jobs sharing one child, their timeouts, a
run that blocks the loop, kill -9 of the child, and sync jobs beside them.

Each test drives a real worker process and polls Redis with a deadline; none sleeps to wait.
Concurrency is read from the spans the jobs write (start and end), not from wall-clock timing.
"""

import os
import signal
from typing import Any

import django_jobs
from django_jobs import CancelOutcome
from django_jobs.inspector import get_inspector
from django_jobs.keys import State
from testproject.probes.async_jobs import AsyncBlocksLoop, AsyncCapped, AsyncInterrupted, AsyncSleep
from testproject.probes.jobs import Sleep, SleepForever, Work
from tests.acceptance.conftest import Worker, done, probe, started
from tests.conftest import RedisNamespace, wait_until


def task_state(task_id: str, queue: str = "default") -> Any:
    return get_inspector().task(queue, task_id)


def spans(ns: RedisNamespace, name: str = "spans") -> list[tuple[str, float, float, int]]:
    out = []
    for item in ns.client.lrange(probe(ns, name), 0, -1):
        tag, begun, ended, pid = item.decode().split()
        out.append((tag, float(begun), float(ended), int(pid)))
    return out


def listed(ns: RedisNamespace, name: str) -> list[str]:
    return [item.decode() for item in ns.client.lrange(probe(ns, name), 0, -1)]


def most_at_once(runs: list[tuple[str, float, float, int]]) -> int:
    """The largest number of runs going on at one instant."""
    events = sorted([(b, 1) for _, b, _, _ in runs] + [(e, -1) for _, _, e, _ in runs])
    running = best = 0
    for _, step in events:  # an end sorts before a start at the same instant
        running += step
        best = max(best, running)
    return best


def test_async_worker__one_child_runs_n_at_once_and_never_more(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given 20 jobs of 500 ms and one child that runs 10 at once (500 ms: the 10 overlap even if
    # a loaded machine stalls the loop between their starts)
    handles = AsyncSleep.enqueue_many([Work(f"j{i}", seconds=0.5) for i in range(20)])

    worker.start("--concurrency", "1", "--async-concurrency", "10")

    # Then all run in that one process, 10 at a time: two batches, not twenty runs in a row
    wait_until(lambda: len(done(redis_ns)) == 20, timeout=30, why=worker.output)
    wait_until(lambda: task_state(handles[-1].id).state == "completed", why=worker.output)
    assert "async concurrency 10: each child runs up to 10 tasks at once" in worker.output()
    runs = spans(redis_ns)
    assert len({pid for *_, pid in runs}) == 1
    assert most_at_once(runs) == 10
    # The 11th started only as one of the first 10 ended.
    first_end = min(ended for _, _, ended, _ in runs)
    assert sorted(begun for _, begun, _, _ in runs)[10] >= first_end


def test_async_worker__a_concurrency_limit_holds_among_one_childs_slots_and_others_flow(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given 6 jobs of a type capped at 2 at once, then 8 of a type without limits
    AsyncCapped.enqueue_many([Work(f"c{i}", seconds=0.5) for i in range(6)])
    AsyncSleep.enqueue_many([Work(f"s{i}", seconds=0.5) for i in range(8)])

    # When one child runs 10 at once
    worker.start("--concurrency", "1", "--async-concurrency", "10")

    # Then the capped ones never ran more than 2 at once, each at its first attempt (a wait for
    # the cap spends none), while the others ran beside them, in the slots the cap left
    # (60 s: under 4 CPU hogs on 2 cores the whole test took 17 to 26 s, start-up included)
    wait_until(lambda: len(listed(redis_ns, "capped_done")) == 6, timeout=60, why=worker.output)
    wait_until(lambda: len(done(redis_ns)) == 8, timeout=60, why=worker.output)
    assert sorted(listed(redis_ns, "capped_done")) == sorted(f"c{i}:1:0" for i in range(6))
    assert most_at_once(spans(redis_ns, "capped_spans")) == 2
    assert most_at_once(spans(redis_ns)) >= 4


def test_async_worker__timeout_is_thrown_into_the_coroutine_and_spares_the_others(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    stuck = AsyncInterrupted.enqueue(Work("stuck"), timeout=0.5, max_attempts=1)
    AsyncSleep.enqueue(Work("beside", seconds=1.5))

    worker.start("--concurrency", "1", "--async-concurrency", "2")

    wait_until(lambda: task_state(stuck.id).state == "dead", timeout=20, why=worker.output)
    assert task_state(stuck.id).error == "JobTimeout: timed out after 0.5 s"
    assert redis_ns.client.lrange(probe(redis_ns, "interrupted"), 0, -1) == [b"stuck:JobTimeout"]
    # The run beside it, in the same child, went on and finished: no crash, no retry.
    wait_until(lambda: done(redis_ns) == ["beside:1:0"], timeout=20, why=worker.output)


def test_async_worker__a_run_that_blocks_the_loop_is_killed_and_the_others_go_back_unspent(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given one child running a coroutine that never yields and two that would have finished
    blocker = AsyncBlocksLoop.enqueue(Work("blocker"), timeout=0.5, max_attempts=1)
    others = AsyncSleep.enqueue_many([Work("a", seconds=0.2), Work("b", seconds=0.2)])

    worker.start("--concurrency", "1", "--async-concurrency", "3")

    # Then the child is killed after the timeout's grace: the blocker is dead for its timeout,
    # the two beside it go back without an attempt spent or a crash counted, and run again.
    wait_until(lambda: task_state(blocker.id).state == "dead", timeout=30, why=worker.output)
    assert "killed after the grace period" in task_state(blocker.id).error
    wait_until(lambda: sorted(done(redis_ns)) == ["a:1:0", "b:1:0"], timeout=30, why=worker.output)
    assert all(task_state(handle.id).crashes == 0 for handle in others)
    assert "was killed: another of its runs was past its timeout" in worker.output()


def test_async_worker__kill_9_of_the_child_puts_all_its_tasks_back(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    AsyncSleep.enqueue_many([Work(f"k{i}", seconds=2) for i in range(3)])
    worker.start("--concurrency", "1", "--async-concurrency", "3")
    pids = {started(redis_ns, f"k{i}") for i in range(3)}
    assert len(pids) == 1

    os.kill(pids.pop(), signal.SIGKILL)

    # Each comes back at once (not after its lease) with the crash counted, and runs again.
    expected = ["k0:1:1", "k1:1:1", "k2:1:1"]
    wait_until(lambda: sorted(done(redis_ns)) == expected, timeout=30, why=worker.output)


def test_async_worker__cancel_reaches_that_run_only_and_it_ends_canceled(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    # Given one child running two jobs that see JobCanceled (one returns, one lets it propagate)
    # and one beside them
    returns = AsyncInterrupted.enqueue(Work("return-c"))
    raises = AsyncInterrupted.enqueue(Work("raise-c"))
    AsyncSleep.enqueue(Work("beside", seconds=2))
    worker.start("--concurrency", "1", "--async-concurrency", "3", CANCEL_GRACE=30)
    assert len({started(redis_ns, tag) for tag in ("return-c", "raise-c", "beside")}) == 1

    # When both are canceled
    assert returns.cancel() is CancelOutcome.REQUESTED
    assert django_jobs.cancel(raises.id) is CancelOutcome.REQUESTED

    # Then each sees JobCanceled at its await and ends canceled, nothing spent; the other runs on
    for handle in (returns, raises):
        wait_until(lambda h=handle: task_state(h.id).state == State.CANCELED, why=worker.output)
        assert task_state(handle.id).error.startswith("JobCanceled: ")
        assert (task_state(handle.id).attempts, task_state(handle.id).crashes) == (0, 0)
    interrupted = redis_ns.client.lrange(probe(redis_ns, "interrupted"), 0, -1)
    assert sorted(interrupted) == [b"raise-c:JobCanceled", b"return-c:JobCanceled"]
    wait_until(lambda: done(redis_ns) == ["beside:1:0"], timeout=20, why=worker.output)


def test_async_worker__runs_sync_jobs_too_under_the_alarm(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    stuck = SleepForever.enqueue(Work("sync-stuck"), timeout=0.5, max_attempts=1)
    Sleep.enqueue(Work("sync", seconds=0.05))
    AsyncSleep.enqueue(Work("async", seconds=0.05))

    worker.start("--concurrency", "1", "--async-concurrency", "4")

    wait_until(lambda: sorted(done(redis_ns)) == ["async:1:0", "sync:1:0"], timeout=20)
    wait_until(lambda: task_state(stuck.id).state == "dead", timeout=20, why=worker.output)
    assert task_state(stuck.id).error == "JobTimeout: timed out after 0.5 s"
