"""Async jobs the worker tests run in a real `runworker` (imported by jobs.py, which registers
them): each reports what it did to Redis under `<namespace>:probe:`, as the sync probes do."""

import asyncio
import os
import time

from django_jobs import Job
from django_jobs.client import get_broker
from django_jobs.exceptions import JobCanceled, JobTimeout
from testproject.probes.jobs import Work, _done, _key


class AsyncSleep(Job[Work]):
    """Await asyncio.sleep(seconds); list its span (probe:spans, "tag start end pid", epoch
    seconds) and its run (probe:done, "tag:attempt:crashes")."""

    async def run(self, payload: Work) -> None:
        client = get_broker().client
        begun = time.time()
        client.hset(_key("started"), payload.tag, f"{os.getpid()}:{self.context.attempt}")
        await asyncio.sleep(payload.seconds)
        client.rpush(_key("spans"), f"{payload.tag} {begun} {time.time()} {os.getpid()}")
        _done(self, "done", payload.tag)


class AsyncCapped(AsyncSleep):
    """AsyncSleep at most 2 at once across every worker and slot: its spans go to
    probe:capped_spans, its runs to probe:capped_done (test_async_worker.py)."""

    concurrency_limit = 2

    async def run(self, payload: Work) -> None:
        begun = time.time()
        await asyncio.sleep(payload.seconds)
        span = f"{payload.tag} {begun} {time.time()} {os.getpid()}"
        get_broker().client.rpush(_key("capped_spans"), span)
        _done(self, "capped_done", payload.tag)


class AsyncInterrupted(Job[Work]):
    """Await for ever; list what interrupted it at its await (probe:interrupted, "tag:Name"),
    then let it propagate (or return, for a tag that starts with "return")."""

    async def run(self, payload: Work) -> None:
        client = get_broker().client
        client.hset(_key("started"), payload.tag, f"{os.getpid()}:{self.context.attempt}")
        try:
            await asyncio.sleep(10**6)
        except (JobTimeout, JobCanceled) as exc:
            client.rpush(_key("interrupted"), f"{payload.tag}:{type(exc).__name__}")
            if payload.tag.startswith("return"):
                return
            raise


class AsyncBlocksLoop(Job[Work]):
    """Call time.sleep in a coroutine: the loop stops with it, so only killing the child ends it."""

    async def run(self, payload: Work) -> None:
        get_broker().client.hset(_key("started"), payload.tag, f"{os.getpid()}:1")
        time.sleep(10**6)


class NapAsync(Job[Work]):
    """Wait `seconds` on the loop (I/O-bound work, as an HTTP call is); count it in probe:napped
    (bench.async_io reads the count)."""

    async def run(self, payload: Work) -> None:
        await asyncio.sleep(payload.seconds)
        get_broker().client.incr(_key("napped"))


class NapSync(Job[Work]):
    """NapAsync as a plain `def run`: the wait holds its child process."""

    def run(self, payload: Work) -> None:
        time.sleep(payload.seconds)
        get_broker().client.incr(_key("napped"))
