"""A real runworker's log lines never quote a sensitive job's payload: a task whose payload no
longer fits its class goes dead with an error that would quote it (a normal job's does), and a
sensitive job that runs gets its payload whole."""

from __future__ import annotations

import json

from django_jobs.client import get_broker
from testproject.probes.jobs import Person, Private, Public
from tests.acceptance.conftest import Worker, probe
from tests.conftest import RedisNamespace

SECRET = "ada@example.com"


def test_runworker__logs_no_payload_of_a_sensitive_job(
    worker: Worker, redis_ns: RedisNamespace
) -> None:
    refused = {job: job.enqueue(Person(SECRET)).id for job in (Private, Public)}
    for task_id in refused.values():  # the payload class changed while the tasks waited
        key = get_broker().keys("default").task(task_id)
        record = json.loads(redis_ns.client.hget(key, "msg"))
        record["payload"] = {"email": f"reject:{SECRET}"}
        redis_ns.client.hset(key, "msg", json.dumps(record))
    ran = Private.enqueue(Person(SECRET)).id

    worker.start("--concurrency", "1", "--burst")
    assert worker.wait() == 0, worker.output()

    lines = worker.output().splitlines()
    private_lines = [line for line in lines if refused[Private] in line or ran in line]
    public_lines = [line for line in lines if refused[Public] in line]
    assert len(private_lines) >= 2, worker.output()
    assert not [line for line in private_lines if SECRET in line], worker.output()
    assert [line for line in public_lines if f"reject:{SECRET} is not an address" in line]
    assert redis_ns.client.lrange(probe(redis_ns, "private"), 0, -1) == [SECRET.encode()]
