# Checked by mypy only (tests/typing/test_types.py); never imported by pytest.
# Each line ending in an "E" marker comment must produce a mypy error containing its text;
# every other line must type-check: a job's run may be `def` or `async def`.
import asyncio
from dataclasses import dataclass

from django_jobs import Job


@dataclass(frozen=True)
class Fetch:
    url: str


class FetchPage(Job[Fetch]):
    async def run(self, payload: Fetch) -> None:
        await asyncio.sleep(0.1)
        print(payload.url.upper(), self.context.attempt)


class FetchSync(Job[Fetch]):
    def run(self, payload: Fetch) -> None:
        print(payload.url)


class Returns(Job[Fetch]):
    async def run(self, payload: Fetch) -> int:  # E: Return type "Coroutine[Any, Any, int]"
        return 1


class WrongPayload(Job[Fetch]):
    async def run(self, payload: int) -> None:  # E: Argument 1 of "run" is incompatible
        pass


FetchPage.enqueue(Fetch(url="https://example.com"))
FetchPage.enqueue(Fetch(uri="x"))  # E: Unexpected keyword argument "uri"
