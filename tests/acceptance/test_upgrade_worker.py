"""A real `manage.py runworker` runs task records an earlier release wrote
(tests/fixtures/task_records_v1.json, see tests/integration/test_upgrades.py)."""

from django_jobs.inspector import get_inspector
from tests.acceptance.conftest import Worker
from tests.conftest import RedisNamespace, wait_until
from tests.integration.test_upgrades import greeted, write_old


def test_runworker__runs_the_records_of_an_earlier_release(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    records = write_old(redis_ns)
    assert get_inspector().retry("default", records["dead"]["id"])  # as an operator would

    worker.start("--concurrency", "1")

    def finished() -> bool:
        tasks = [get_inspector().task("default", record["id"]) for record in records.values()]
        return all(task is None or task.state == "completed" for task in tasks)

    # Each run is acknowledged a moment after its body greeted: wait for both.
    wait_until(finished, timeout=30, why=worker.output)
    assert greeted(redis_ns) == ["ada@example.com:2", "bob@example.com:1"], worker.output()
