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

    expected = ["ada@example.com:2", "bob@example.com:1"]
    wait_until(lambda: greeted(redis_ns) == expected, timeout=30, why=worker.output)
    for record in records.values():
        task = get_inspector().task("default", record["id"])
        assert task is None or task.state == "completed", worker.output()
