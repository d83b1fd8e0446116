"""What one admin or API request costs Redis: bytes out of it (INFO `total_net_output_bytes`,
on a redis-server of the test's own so that no other client counts) and time, over large dead
tasks, a huge hand-written record, odd keys in our namespace and hostile paging input.

The figures printed (`pytest -s`) are those of docs/admin.rst's "Security" section.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_jobs import keys
from django_jobs.admin.pages import task_page
from django_jobs.message import Message, encode
from tests.conftest import RedisServer

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:django_jobs_task_changelist")
API = "/api/v1/admin/jobs"
#: Dead tasks written, and the size of each one's traceback (as a deep stack would have).
DEAD = 300
TRACEBACK = 100_000
MB = 1_000_000


@pytest.fixture
def redis(private_redis: RedisServer, settings: Any) -> Any:
    settings.JOBS = {"REDIS_URL": private_redis.url, "NAMESPACE": "t"}
    return private_redis.client()


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root"))
    return client


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("api-root"))
    return client


def write_dead(
    redis: Any, count: int, traceback: int, *, queue: str = "default", pad: int = 0,
    job: Any = lambda i: "app.Send",
) -> list[str]:  # fmt: skip
    """Dead tasks as the worker leaves them, each with a traceback of `traceback` bytes and a
    payload of about `pad` bytes more; `job(i)` names the i-th one's job."""
    pipe = redis.pipeline(transaction=False)
    ids = [f"{i:032x}" for i in range(count)]
    for i, task_id in enumerate(ids):
        msg = encode(
            Message(task_id, job(i), queue, {"to": f"u{i}@example.com", "pad": "p" * pad}, 5,
                    300, 86400, f"welcome:{i}")
        )  # fmt: skip
        pipe.hset(
            f"t:{{{queue}}}:t:{task_id}",
            mapping={"state": "dead", "msg": msg, "attempts": 5, "enqueued_at": 1e9 + i,
                     "died_at": 1e9 + i, "error": "RuntimeError: boom",
                     "traceback": "x" * traceback},
        )  # fmt: skip
        pipe.zadd(f"t:{{{queue}}}:dead", {task_id: 1e9 + i})
    pipe.execute()
    return ids


def cost(redis: Any, request: Callable[[], Any]) -> tuple[Any, int, float]:
    """The response, the bytes Redis sent, and the seconds the request took."""
    before = int(redis.info("stats")["total_net_output_bytes"])
    started = time.perf_counter()
    response = request()
    seconds = time.perf_counter() - started
    sent = int(redis.info("stats")["total_net_output_bytes"]) - before
    return response, sent, seconds


def report(what: str, sent: int, seconds: float, response: Any) -> None:
    print(f"\n{what}: {sent / MB:.3f} MB out of Redis, {seconds * 1000:.0f} ms, "
          f"page {len(response.content) / MB:.3f} MB")  # fmt: skip


@pytest.mark.parametrize(
    "query",
    [{"job": "app.Other"}, {"q": "nothing-like-it"}, {"queue": "default", "state": "dead"}],
    ids=["job filter", "key search", "one queue's page"],
)
def test_reads__a_listing_reads_no_traceback(
    redis: Any, staff: Client, query: dict[str, str]
) -> None:
    write_dead(redis, DEAD, TRACEBACK)

    response, sent, seconds = cost(redis, lambda: staff.get(TASKS, {"state": "dead", **query}))

    report(f"admin {query}", sent, seconds, response)
    assert response.status_code == 200
    assert sent < DEAD * TRACEBACK / 20  # the tracebacks are not read (they were: 30 MB)


def test_reads__the_api_listing_with_a_job_filter_reads_no_traceback(
    redis: Any, api: APIClient
) -> None:
    write_dead(redis, DEAD, TRACEBACK)

    response, sent, seconds = cost(redis, lambda: api.get(f"{API}/failed?job=app.Other"))

    report("API /failed?job=app.Other", sent, seconds, response)
    assert response.status_code == 200
    assert sent < DEAD * TRACEBACK / 20


#: Dead tasks with a payload of about PAD bytes (60 MB in all): what a filter must not read.
MANY, PAD = 2000, 30_000


@pytest.mark.parametrize(
    ("where", "query"),
    [("admin", {"job": "app.Other"}), ("admin", {"q": "nothing-like-it"}),
     ("API", {"job": "app.Other"})],
    ids=["admin job filter", "admin key search", "API job filter"],
)  # fmt: skip
def test_reads__a_filter_moves_only_what_matches_whatever_the_records_hold(
    redis: Any, staff: Client, api: APIClient, where: str, query: dict[str, str]
) -> None:
    write_dead(redis, MANY, 0, pad=PAD)
    client = staff if where == "admin" else api
    url = TASKS if where == "admin" else f"{API}/failed"

    response, sent, seconds = cost(redis, lambda: client.get(url, {"state": "dead", **query}))

    report(f"{where} {query} over {MANY} dead tasks of {PAD:,} bytes", sent, seconds, response)
    assert response.status_code == 200
    assert sent < MB  # the records hold 60 MB; the listing's byte budget alone allows 8 MB


def test_reads__a_job_filter_finds_the_few_among_many(redis: Any, api: APIClient) -> None:
    ids = write_dead(redis, MANY, 0, pad=1000, job=lambda i: "app.Other" if i % 400 == 7 else "x")

    found, url = [], f"{API}/failed?job=app.Other&per_page=50"
    while url:  # a client follows `next` (a request visits a bounded number of records)
        page = api.get(url).json()
        found += [t["id"] for t in page["results"]]
        url = page["next"]

    assert found == [ids[i] for i in range(MANY - 1, -1, -1) if i % 400 == 7]


HUGE = 20 * MB


def test_reads__a_huge_hand_written_record_is_cut_at_read_time(
    redis: Any, staff: Client, api: APIClient
) -> None:
    (task_id,) = write_dead(redis, 1, 0)
    redis.hset(f"t:{{default}}:t:{task_id}", mapping={"error": "e" * HUGE, "traceback": "t" * HUGE})

    for name, request in [
        ("admin task page", lambda: staff.get(f"{TASKS}default/{task_id}/")),
        ("admin list", lambda: staff.get(TASKS, {"state": "dead"})),
        ("API task", lambda: api.get(f"{API}/{task_id}")),
        ("API /failed", lambda: api.get(f"{API}/failed")),
    ]:
        response, sent, seconds = cost(redis, request)
        report(f"huge record, {name}", sent, seconds, response)
        assert response.status_code == 200, name
        assert sent < MB, name
        assert len(response.content) < MB, name
    page = staff.get(f"{TASKS}default/{task_id}/").content.decode()
    assert "cut: 20,000,000 bytes in all" in page


# -- odd keys and hostile paging ------------------------------------------------------------


def test_odd_entries__every_page_renders_them_and_delete_removes_them(
    redis: Any, staff: Client, api: APIClient
) -> None:
    (good,) = write_dead(redis, 1, 0)
    slashed, typed = "../x/y", "f" * 32
    redis.zadd("t:{default}:dead", {slashed: 2e9, typed: 2e9 + 1})
    redis.hset(f"t:{{default}}:t:{slashed}", mapping={"state": "dead", "msg": "not json"})
    redis.set(f"t:{{default}}:t:{typed}", "written by hand")

    for query in ({"state": "dead"}, {"state": "dead", "queue": "default"}, {"q": "welcome"}):
        listing = staff.get(TASKS, query)
        assert listing.status_code == 200, query
    page = staff.get(TASKS, {"state": "dead"}).content.decode()
    assert page.count("(undecodable)") == 2
    assert "is not a hash but a string" in page
    failed = api.get(f"{API}/failed")
    assert failed.status_code == 200
    assert {t["id"] for t in failed.json()["results"]} == {good, slashed, typed}
    for task_id in (slashed, typed):
        assert staff.get(task_page("default", task_id)).status_code == 200, task_id
        assert staff.get(task_page("default", task_id, "delete")).status_code == 200, task_id
    assert api.get(f"{API}/{typed}").status_code == 200

    deleted = staff.post(task_page("default", slashed, "delete"), {"state": "dead"})
    gone = api.delete(f"{API}/{typed}")

    assert (deleted.status_code, gone.status_code) == (302, 204)
    assert [t["id"] for t in api.get(f"{API}/failed").json()["results"]] == [good]
    assert redis.zrange("t:{default}:dead", 0, -1) == [good.encode()]
    assert not redis.exists(f"t:{{default}}:t:{slashed}", f"t:{{default}}:t:{typed}")


@pytest.mark.parametrize(
    "query",
    [{"p": str(10**17)}, {"p": "9" * 40}, {"start": str(10**17)}, {"start": "-5"}, {"p": "x"}],
)
def test_paging__past_int64_is_a_page_not_a_500(
    redis: Any, staff: Client, query: dict[str, str]
) -> None:
    write_dead(redis, 3, 0)

    response = staff.get(TASKS, {"queue": "default", "state": "dead", **query})

    assert response.status_code == 200


@pytest.mark.parametrize(
    "query",
    ["per_page=100000000000000000", "per_page=0", "cursor=eyJkZWZhdWx0IjoxMDAwMDAwMDAwMDB9",
     "per_page=" + "9" * 5000],
)  # fmt: skip
def test_paging__the_api_refuses_huge_pages_and_offsets(
    redis: Any, api: APIClient, query: str
) -> None:
    response = api.get(f"{API}/failed?{query}")

    assert response.status_code == 400


def test_odd_entries__an_orphan_id_and_a_worker_key_of_another_type(
    redis: Any, staff: Client, api: APIClient
) -> None:
    (good,) = write_dead(redis, 1, 0)
    orphan = "b" * 32  # listed as dead, its record gone
    redis.zadd("t:{default}:dead", {orphan: 2e9})
    redis.zadd(keys.workers("t"), {"host:1": 2e9})
    redis.set(keys.worker("t", "host:1"), "written by hand")

    workers = staff.get(reverse("admin:django_jobs_worker_changelist"))
    overview = api.get(API)
    listed = staff.get(TASKS, {"queue": "default", "state": "dead"})
    deleted = staff.post(
        f"{TASKS}?queue=default&state=dead",
        {"action": "delete_selected", "_selected_action": [orphan], "post": "yes"},
    )

    assert (workers.status_code, overview.status_code, listed.status_code) == (200, 200, 200)
    assert overview.json()["workers"] == []
    assert orphan in listed.content.decode()
    assert deleted.status_code == 302
    assert redis.zrange("t:{default}:dead", 0, -1) == [good.encode()]


@pytest.mark.parametrize("how", ["delete all dead", "delete ticked", "retry ticked"])
def test_reads__bulk_actions_read_no_traceback(redis: Any, staff: Client, how: str) -> None:
    ids = write_dead(redis, 100, TRACEBACK)
    listing = f"{TASKS}?state=dead"  # every queue: the ticked tasks are located first
    action = "retry_selected" if how == "retry ticked" else "delete_selected"
    url, data = {
        "delete all dead": (reverse("admin:django_jobs_queue_delete_all_dead", args=["default"]),
                            {"post": "yes"}),
    }.get(how, (listing, {"action": action, "_selected_action": ids, "post": "yes"}))  # fmt: skip

    response, sent, seconds = cost(redis, lambda: staff.post(url, data))

    report(f"admin {how} of 100", sent, seconds, response)
    assert response.status_code == 302
    assert redis.zcard("t:{default}:dead") == 0
    assert sent < 100 * TRACEBACK / 20  # the tracebacks are not read (they were: 10 MB)


def test_odd_entries__a_structure_of_another_type_is_named_on_every_page(
    redis: Any, staff: Client, api: APIClient
) -> None:
    write_dead(redis, 1, 0)
    redis.set("t:{low}:retry", "written by hand")

    pages = [staff.get(reverse("admin:django_jobs_queue_changelist")), staff.get(TASKS)]
    answer = api.get(API)

    for page in [*pages, answer]:
        assert page.status_code == 503
        said = html.unescape(page.content.decode()).replace('\\"', '"')
        assert "'t:{low}:retry' is a string, not the sorted set" in said
    redis.delete("t:{low}:retry")
    assert staff.get(TASKS).status_code == 200
