"""Running a coroutine handler (``async def run``): on an event loop, interruptible.

A sync handler is interrupted by an exception raised inside it (JobTimeout from the alarm,
LeaseLost, JobCanceled). A coroutine mostly is not running when the interrupt comes: it waits at
an await while the loop's own code runs. So the exception is thrown into the coroutine at that
await (`Interruptible.interrupt`), as asyncio throws CancelledError into a cancelled task. What
is thrown is the error's *cancelling form*: an instance of a subclass of both the error and
asyncio.CancelledError, named as the error. The handler's ``except JobTimeout`` catches it, and
asyncio's own machinery inside the handler (TaskGroup, timeout(), gather) treats it as the
cancellation it is. A run that lets it propagate ends with that error, as a sync run does.

`run(coroutine)` runs one coroutine to completion on a loop of its own: the inline mode, the test
helpers, and a worker child running one task at a time. An interrupt a signal handler raises in
the loop's code (the child's alarm, its lease-lost signal) is caught around the loop and thrown
into the coroutine, which then ends as it will. The worker's async child runs many coroutines on
one loop and interrupts them itself (worker/async_child.py).

Throwing an exception of our choosing takes asyncio's pure-Python Task (`asyncio.tasks._PyTask`,
the reference implementation beside the C one) and one override of its step. Where that is not
available, the handler sees a plain CancelledError at its await, and the run still ends with the
error it was interrupted for.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections as _close_old_connections

from django_jobs.exceptions import JobsError

_Base: type[asyncio.Task[Any]] = getattr(asyncio.tasks, "_PyTask", asyncio.Task)
#: The pure-Python Task's step, by its mangled name; what `Interruptible` overrides.
_STEP = "_Task__step"
#: Whether the handler sees the error itself at its await (else a plain CancelledError).
THROWS = hasattr(_Base, _STEP)

#: The cancelling form of each error class thrown so far.
_FORMS: dict[type[BaseException], type[BaseException]] = {}


def cancelling(exc: BaseException) -> BaseException:
    """exc as an instance of a subclass of its class and asyncio.CancelledError (same name,
    message and attributes): what an interrupted coroutine sees at its await."""
    if isinstance(exc, asyncio.CancelledError):
        return exc
    cls = type(exc)
    form = _FORMS.get(cls)
    if form is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                     "__doc__": cls.__doc__}  # fmt: skip
        form = _FORMS[cls] = type(cls.__name__, (cls, asyncio.CancelledError), namespace)
    thrown = form.__new__(form, *exc.args)
    thrown.args = exc.args
    thrown.__dict__.update(vars(exc))
    return thrown


class Interruptible(_Base):  # type: ignore[valid-type,misc]
    """A Task whose coroutine an error can be thrown into at its current await."""

    #: The error to throw at the next step (its cancelling form), until thrown.
    _pending: BaseException | None = None
    #: The error this task was last interrupted with (as given), if any.
    reason: BaseException | None = None

    def interrupt(self, exc: BaseException) -> bool:
        """Throw exc into the coroutine at its await, within one turn of the loop; False if the
        task is done already. Call on the loop's thread."""
        if self.done():
            return False
        self.reason = exc
        self._pending = cancelling(exc)
        return bool(self.cancel(msg=str(exc)))

    if THROWS:

        def _Task__step(self, exc: BaseException | None = None) -> None:
            pending = self._pending
            if pending is not None and (
                isinstance(exc, asyncio.CancelledError) or getattr(self, "_must_cancel", False)
            ):
                self._pending = None
                exc = pending  # a CancelledError too: the step throws it as it is
            getattr(super(), _STEP)(exc)


def result_of(task: Interruptible) -> Any:
    """The task's result, or what it raised, as `unwrap` tells it."""
    try:
        return task.result()
    except BaseException as exc:
        found = unwrap(exc, task.reason)
        if found is exc:
            raise
        raise found from exc


def unwrap(exc: BaseException, reason: BaseException | None) -> BaseException:
    """What a run interrupted for reason ended with, for the outcome: the interrupt when the run
    ended on it (as thrown, as a plain CancelledError without THROWS, or inside an exception
    group: a TaskGroup in the handler groups what it does not take for a plain cancellation),
    else exc itself."""
    if reason is None or isinstance(exc, type(reason)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matching = exc.subgroup(type(reason))
        if matching is None:
            return exc
        found: BaseException = matching
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        return found
    return reason if isinstance(exc, asyncio.CancelledError) else exc


def run(awaitable: Awaitable[Any], *, hygiene: bool = False) -> Any:
    """Run a coroutine (a handler's run) to completion; return its result or raise what it
    raised.

    On a loop of its own on this thread; on a thread of its own (the caller's context copied)
    when this thread already runs a loop (an inline run from async code), since a loop cannot
    run inside another. With hygiene, stale database connections are closed before and after on
    the thread Django's async ORM runs on (`hygienic`).
    """
    coroutine = hygienic(awaitable) if hygiene else _coroutine(awaitable)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="django_jobs-run") as pool:
        return pool.submit(contextvars.copy_context().run, _run_here, coroutine).result()


#: `close_old_connections()` on the thread sync_to_async runs the ORM on, where an async
#: handler's database connections live.
close_old_connections = sync_to_async(_close_old_connections)


async def hygienic(
    awaitable: Awaitable[Any], close: Callable[[], Awaitable[None]] = close_old_connections
) -> Any:
    """Await it between two closes of stale database connections, as Django's ASGI handler
    brackets an async view."""
    await close()
    try:
        return await awaitable
    finally:
        await close()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _coroutine(awaitable: Awaitable[Any]) -> Coroutine[Any, Any, Any]:
    return awaitable if asyncio.iscoroutine(awaitable) else _await(awaitable)


def _run_here(coroutine: Coroutine[Any, Any, Any]) -> Any:
    loop = asyncio.new_event_loop()
    try:
        task = Interruptible(coroutine, loop=loop)
        while not task.done():
            try:
                loop.run_until_complete(task)
            except JobsError as exc:
                # Raised by a signal handler (the alarm, a lost lease, a cancel): in the loop's
                # code, or in the handler's own code (then the task has it, and is done).
                if not task.done():
                    task.interrupt(exc)
            except BaseException:
                if not task.done():
                    raise
        return result_of(task)
    finally:
        close(loop)


def close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what still runs on the loop (tasks the handler left), wait for it, close it (what
    asyncio.run does at its end)."""
    try:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
