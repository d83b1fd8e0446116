"""The Jobs admin in a real headless Chromium (Debian's package, driven by Playwright).

An operator logs in, finds the dead task and its error, retries it and sees it leave the dead
list. Screenshots of the queues page (light and dark), the dead list and the task page are saved
in the test's tmp_path.

On the Tasks page every queue shows at once: an operator reads the dead tasks of three queues
merged by time at 1400 px (the key columns on screen, nothing scrolling sideways), filters by a
queue, and reads the Queues, Tasks, task and Workers pages on a 420 px phone screen, each with a
screenshot (docs/_static/*-420.png with JOBS_SCREENSHOTS_DIR=docs/_static).

On the Flow runs page an operator filters the runs by status, reads a run's timeline, sends it
the signal it waits for from the form, and cancels another run; with JOBS_SCREENSHOTS_DIR=
docs/_static the run's timeline (docs/flows-admin.rst shows it) is saved there too.

On the Schedules page an operator runs a schedule now, follows its last fire to the task, pauses
it and reads a schedule's fire history; the page is read again on a 420 px screen. With
JOBS_SCREENSHOTS_DIR=docs/_static the Schedules page's screenshot (docs/admin.rst shows it) is
saved there too.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Browser, Page, expect, sync_playwright

from django_jobs import Job
from django_jobs.client import get_broker
from django_jobs.conf import get_settings
from django_jobs.flows import Context, Flow, get_run
from django_jobs.inspector import get_inspector
from django_jobs.testing import run_burst
from django_jobs.worker.heartbeat import Heartbeat
from tests.conftest import RedisNamespace, wait_until

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


#: Set to a directory to keep the docs' screenshots there too (docs/_static does).
SHOTS_DIR = "JOBS_SCREENSHOTS_DIR"


@dataclass
class Order:
    number: int
    email: str


class ChargeCard(Job[Order]):
    max_attempts = 1

    def run(self, payload: Order) -> None:
        raise ConnectionError(f"payment gateway refused order {payload.number}")


@pytest.fixture
def operator(transactional_db: Any) -> User:
    user = User.objects.create_user("operator", password="a-long-pass-phrase", is_staff=True)
    for codename in ("view_task", "change_task", "delete_task"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


@pytest.fixture
def browser(operator: User) -> Iterator[Browser]:
    """Chromium, started after the database is set up and stopped before it is torn down.

    Playwright's sync API runs an event loop in this thread while it is open, and Django
    refuses database calls from a thread with a running loop.
    """
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: run `apt-get install chromium` (.ci/run does) to run the "
            f"browser tests."
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def log_in(page: Page, base: str, user: User) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", user.get_username())
    page.fill("#id_password", "a-long-pass-phrase")
    page.click("input[type=submit]")
    expect(page.locator("#content h1")).to_have_text("Site administration")


def screenshot(page: Page, path: Path) -> Path:
    page.screenshot(path=str(path), full_page=True)
    assert path.exists(), path
    assert path.stat().st_size > 0, path
    return path


def docs_screenshot(page: Page, tmp_path: Path, name: str) -> list[Path]:
    """The page's screenshot in tmp_path, and in JOBS_SCREENSHOTS_DIR when it is set."""
    shots = [screenshot(page, tmp_path / name)]
    if os.environ.get(SHOTS_DIR):
        shots.append(screenshot(page, Path(os.environ[SHOTS_DIR]) / name))
    return shots


def no_sideways_scroll(page: Page, width: int) -> None:
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{page.url} is {scroll} px wide on a {width} px screen"


def test_admin_browser__find_a_dead_task_and_retry_it(
    browser: Browser,
    live_server: Any,
    redis_ns: RedisNamespace,
    operator: User,
    tmp_path: Path,
) -> None:
    # Given a dead task (its card was refused) and an order still waiting.
    dead = ChargeCard.enqueue(Order(1017, "ada@example.com"), idempotency_key="order-1017").id
    run_burst()
    ChargeCard.enqueue(Order(1018, "bob@example.com"), delay=3600)
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    page = context.new_page()
    log_in(page, live_server.url, operator)

    # The Jobs section leads to the queues: default has one dead task.
    page.get_by_role("link", name="Queues").first.click()
    expect(page.locator("#content h1")).to_have_text("Queues")
    row = page.locator("tr.jobs-queue-default")
    expect(row.locator("td.field-dead")).to_have_text("1")
    expect(row.locator("td.field-scheduled")).to_have_text("1")
    shots = [screenshot(page, tmp_path / "queues.png")]

    # The dead list shows the task with the first line of its error.
    row.locator("td.field-dead a").click()
    task_row = page.locator("#result_list tbody tr", has=page.locator(f"input[value='{dead}']"))
    expect(task_row.locator("td.field-error")).to_contain_text(
        "ConnectionError: payment gateway refused order 1017"
    )
    shots.append(screenshot(page, tmp_path / "dead.png"))

    # Its page has the payload and the whole traceback.
    task_row.locator("th.field-id a").click()
    expect(page.locator("#content h1")).to_have_text(f"Task {dead}")
    expect(page.locator("pre.jobs-payload")).to_contain_text('"number": 1017')
    expect(page.locator("pre.jobs-traceback")).to_contain_text("Traceback (most recent call last)")
    expect(page.locator("pre.jobs-traceback")).to_contain_text("raise ConnectionError")
    shots.append(screenshot(page, tmp_path / "task.png"))

    # Retry it: it is pending again, and gone from the dead list.
    page.get_by_role("button", name="Retry now").click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Task {dead} will run now.")
    info = get_inspector().task("default", dead)
    assert info is not None
    assert info.state == "pending"
    page.get_by_role("link", name="Queues").first.click()
    expect(page.locator("tr.jobs-queue-default td.field-dead")).to_have_text("0")
    expect(page.locator("tr.jobs-queue-default td.field-pending")).to_have_text("1")
    page.locator("tr.jobs-queue-default td.field-dead a").click()
    expect(page.locator("p.jobs-empty")).to_have_text("No dead tasks in queue default.")
    assert dead not in page.content()

    # The same pages follow the admin's dark theme.
    dark = browser.new_context(viewport={"width": 1600, "height": 900}, color_scheme="dark")
    dark_page = dark.new_page()
    log_in(dark_page, live_server.url, operator)
    dark_page.goto(f"{live_server.url}/admin/django_jobs/queue/")
    background = dark_page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert re.fullmatch(r"rgb\((\d+), (\d+), (\d+)\)", background), background
    assert sum(map(int, re.findall(r"\d+", background))) < 3 * 80, background
    shots.append(screenshot(dark_page, tmp_path / "queues-dark.png"))
    dark.close()
    context.close()

    print("\nscreenshots:", *shots, sep="\n  ")


def test_admin_browser__every_queue_at_once_and_a_phone_screen(
    browser: Browser,
    live_server: Any,
    redis_ns: RedisNamespace,
    operator: User,
    tmp_path: Path,
) -> None:
    # Given dead tasks in three queues, dying in this order, and a worker running one more.
    order = []
    for number, queue in enumerate(("critical", "low", "default", "critical"), start=2001):
        order.append(ChargeCard.enqueue(Order(number, f"{number}@example.com"), queue=queue).id)
        run_burst([queue])
    running = ChargeCard.enqueue(Order(2100, "eve@example.com"), queue="low").id
    delivery = get_broker().dequeue(["low"])
    assert delivery is not None
    assert delivery.id == running
    info: dict[str, str | int | float] = {
        "host": "worker-1.internal.example.com",
        "pid": 4242,
        "queues": "critical,default,low",
        "concurrency": 8,
        "started": time.time(),
    }
    Heartbeat(get_broker(), "worker-1:4242:aaaaaa", info, lambda: [delivery]).tick()
    wide = browser.new_context(viewport={"width": 1400, "height": 900})
    page = wide.new_page()
    log_in(page, live_server.url, operator)

    # The Tasks page shows the dead tasks of every queue, the newest death first.
    page.get_by_role("link", name="Tasks").first.click()
    page.wait_for_load_state("load")  # its stylesheets applied before anything is measured
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(4)
    expect(page.locator("#result_list tbody td.field-queue")).to_have_text(
        ["critical", "default", "low", "critical"]
    )
    ids = [rows.nth(n).locator("input.action-select").get_attribute("value") for n in range(4)]
    assert ids == order[::-1]
    expect(page.locator("#changelist-filter li.selected").first).to_contain_text("All (4)")
    # The key columns are on the screen, the list scrolling in neither the page nor its box:
    # job, attempts, last error, times.
    results = page.locator("#changelist-form .results").bounding_box()
    assert results is not None
    for cell in ("field-job", "field-error", "field-died_at", "field-attempts", "field-crashes"):
        box = rows.first.locator(f"td.{cell}").bounding_box()
        assert box is not None, cell
        assert box["x"] + box["width"] <= results["x"] + results["width"], (cell, box, results)
    inner = page.evaluate(
        "(() => { const r = document.querySelector('#changelist-form .results');"
        " return [r.scrollWidth, r.clientWidth]; })()"
    )
    assert inner[0] <= inner[1], f"the list scrolls sideways in its box: {inner}"
    no_sideways_scroll(page, 1400)
    shots = docs_screenshot(page, tmp_path, "tasks.png")

    # The queue is a filter.
    page.locator("#changelist-filter a", has_text="critical (2)").click()
    expect(page.locator("#result_list tbody td.field-queue")).to_have_text(["critical"] * 2)
    wide.close()

    # On a phone every page reads without scrolling sideways.
    phone = browser.new_context(viewport={"width": 420, "height": 800})
    small = phone.new_page()
    log_in(small, live_server.url, operator)
    pages = [
        ("queue/", "tr.jobs-queue-critical td.field-dead", "queues-420.png"),
        ("task/", "tr td.field-error", "tasks-420.png"),
        (f"task/low/{order[1]}/", "pre.jobs-payload", "task-420.png"),
        ("worker/", "td.field-tasks", "workers-420.png"),
    ]
    for path, visible, name in pages:
        small.goto(f"{live_server.url}/admin/django_jobs/{path}")
        expect(small.locator(visible).first).to_be_visible()
        no_sideways_scroll(small, 420)
        shots += docs_screenshot(small, tmp_path, name)
    expect(small.locator("td.field-tasks")).to_contain_text(running)
    phone.close()

    print("\nscreenshots:", *shots, sep="\n  ")


@dataclass
class Digest:
    team: str = "ops"


class SendDigest(Job[Digest]):
    name = "reports.SendDigest"

    def run(self, payload: Digest) -> None:
        pass


def test_admin_browser__schedules_page_run_now_pause_and_narrow_screen(
    browser: Browser,
    live_server: Any,
    redis_ns: RedisNamespace,
    operator: User,
    settings: Any,
    tmp_path: Path,
) -> None:
    # Given two schedules, one of which has fired once (an operator's run now).
    settings.JOBS = {
        **settings.JOBS,
        "SCHEDULE": {
            "hourly-digest": {"job": SendDigest.name, "cron": "0 * * * *", "queue": "low"},
            "nightly-cleanup": {
                "job": SendDigest.name,
                "cron": "30 2 * * *",
                "timezone": "Europe/Paris",
                "payload": {"team": "cleanup"},
            },
            "sync-crm": {"job": SendDigest.name, "every": 30},
        },
    }
    first = get_inspector().run_schedule_now("nightly-cleanup")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, live_server.url, operator)

    # The Jobs section leads to the schedules, each with its job, time zone and next fire.
    page.get_by_role("link", name="Schedules").first.click()
    expect(page.locator("#content h1")).to_have_text("Schedules")
    nightly = page.locator("tr.jobs-schedule-nightly-cleanup")
    expect(nightly.locator("td.field-timezone")).to_have_text("Europe/Paris")
    expect(nightly.locator("td.field-expression")).to_contain_text("30 2 * * *")
    expect(page.locator("tr.jobs-schedule-sync-crm td.field-expression")).to_contain_text(
        "every 30 seconds"
    )
    expect(page.locator("tr.jobs-schedule-sync-crm td.field-last-fire")).to_have_text("never")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    shots = docs_screenshot(page, tmp_path, "schedules.png")

    # Run now: a task is enqueued, and the last fire links to it.
    sync = page.locator("tr.jobs-schedule-sync-crm")
    sync.get_by_role("button", name="Run now").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Schedule sync-crm enqueued task")
    info = get_inspector().schedule("sync-crm")
    assert info.last_task_id is not None
    sync.locator("td.field-last-fire a").click()
    expect(page.locator("#content h1")).to_have_text(f"Task {info.last_task_id}")
    page.go_back()

    # Pause it: the row says so, and offers Resume.
    page.locator("tr.jobs-schedule-sync-crm").get_by_role("button", name="Pause").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Schedule sync-crm is paused")
    expect(page.locator("tr.jobs-schedule-sync-crm td.field-status")).to_contain_text("Paused")
    expect(page.locator("tr.jobs-schedule-sync-crm td.field-next-fire")).to_have_text("paused")
    assert get_inspector().schedule("sync-crm").paused

    # The schedule's own page lists its fires, each linking to its task.
    page.locator("tr.jobs-schedule-nightly-cleanup th.field-name a").click()
    expect(page.locator("#content h1")).to_have_text("Schedule nightly-cleanup")
    expect(page.locator("table.jobs-fires td.field-id")).to_have_text([first])
    shots.append(screenshot(page, tmp_path / "schedule.png"))
    context.close()

    # On a 420 px screen every row is readable without scrolling sideways.
    narrow = browser.new_context(viewport={"width": 420, "height": 800})
    small = narrow.new_page()
    log_in(small, live_server.url, operator)
    small.goto(f"{live_server.url}/admin/django_jobs/schedule/")
    expect(small.locator("tr.jobs-schedule-nightly-cleanup td.field-timezone")).to_be_visible()
    width = small.evaluate("document.documentElement.scrollWidth")
    assert width <= 420, width
    box = small.locator("tr.jobs-schedule-nightly-cleanup").bounding_box()
    assert box is not None
    assert box["width"] <= 420, box
    shots += docs_screenshot(small, tmp_path, "schedules-420.png")
    # And a schedule's own page, with its fire history.
    small.goto(f"{live_server.url}/admin/django_jobs/schedule/nightly-cleanup/")
    expect(small.locator("table.jobs-fires td.field-id")).to_have_text([first])
    no_sideways_scroll(small, 420)
    shots += docs_screenshot(small, tmp_path, "schedule-420.png")
    narrow.close()

    print("\nscreenshots:", *shots, sep="\n  ")


# -- flows ----------------------------------------------------------------------------------


@dataclass
class Checkout:
    number: int


#: Calls of the warehouse step so far, by order: its first call fails (a retry on the timeline).
WAREHOUSE_CALLS: dict[int, int] = {}


def reserve_stock(number: int) -> dict[str, Any]:
    return {"order": number, "reserved": 3}


def capture_payment(number: int, ref: str) -> str:
    return f"captured {ref} for order {number}"


def notify_warehouse(number: int) -> str:
    WAREHOUSE_CALLS[number] = WAREHOUSE_CALLS.get(number, 0) + 1
    if WAREHOUSE_CALLS[number] == 1:
        raise ConnectionError("warehouse API timed out")
    return "queued for shipping"


class PlaceOrder(Flow[Checkout]):
    """Reserve, wait for the payment (30 minutes), capture it, tell the warehouse."""

    def run(self, ctx: Context, input: Checkout) -> dict[str, Any]:
        ctx.step("reserve-stock", reserve_stock, input.number)
        payment, paid = ctx.wait_for_signal("paid", timeout=30 * 60)
        if not paid:
            return {"order": input.number, "status": "expired"}
        ctx.step("capture-payment", capture_payment, input.number, payment["ref"])
        ctx.step("notify-warehouse", notify_warehouse, input.number, backoff=0.05)
        return {"order": input.number, "status": "shipped"}


def drain_flows() -> None:
    run_burst(list(get_settings().flow_queues))


def test_admin_browser__flow_runs_timeline_signal_and_cancel(
    browser: Browser,
    live_server: Any,
    redis_ns: RedisNamespace,
    operator: User,
    tmp_path: Path,
) -> None:
    # Given three checkouts waiting for their payment, and one finished run.
    WAREHOUSE_CALLS.clear()
    for number in (1017, 1018, 1019):
        PlaceOrder.start(Checkout(number), call_id=f"order-{number}")
    drain_flows()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, live_server.url, operator)

    # The Jobs section leads to the flow runs, newest first.
    page.get_by_role("link", name="Flow runs").first.click()
    expect(page.locator("#content h1")).to_have_text("Flow runs")
    expect(page.locator("th.field-call-id")).to_have_text(
        ["order-1019", "order-1018", "order-1017"]
    )
    page.locator("ul.flows-statuses").get_by_role("link", name="Succeeded").click()
    expect(page.locator("p.jobs-empty")).to_have_text("No flow runs succeeded.")
    page.locator("ul.flows-statuses").get_by_role("link", name="Waiting").click()
    expect(page.locator("td.field-status")).to_have_text(["waiting"] * 3)
    page.fill("#flows-q", "order-1017")
    page.get_by_role("button", name="Find").click()
    expect(page.locator("th.field-call-id")).to_have_text(["order-1017"])

    # A run's page: its timeline so far, and the signal it waits for in the form.
    page.locator("th.field-call-id a").click()
    expect(page.locator("#content h1")).to_have_text("Flow run order-1017")
    expect(page.locator(".flows-step-name")).to_have_text(["reserve-stock", "paid"])
    expect(page.locator("#flows-signal-name")).to_have_value("paid")
    page.fill("#flows-signal-value", '{"ref": "pay-7731"}')
    page.get_by_role("button", name="Send signal").click()
    expect(page.locator("ul.messagelist")).to_contain_text(
        "Signal 'paid' sent to flow run order-1017"
    )
    expect(page.locator("tr.flows-signal")).to_contain_text("pay-7731")

    # The worker's side: the run goes on, the warehouse step fails once and is retried.
    wait_until(lambda: drain_flows() or get_run("order-1017").status == "succeeded", timeout=10)  # type: ignore[union-attr]
    page.reload()
    expect(page.locator(".field-status .flows-status")).to_have_text("succeeded")
    expect(page.locator(".flows-step-name")).to_have_text(
        ["reserve-stock", "paid", "capture-payment", "notify-warehouse"]
    )
    warehouse = page.locator("li.flows-step", has=page.locator("text=notify-warehouse"))
    expect(warehouse.locator(".flows-attempts")).to_have_text("2 attempts")
    expect(page.locator("pre.flows-output")).to_contain_text('"status": "shipped"')
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    shots = docs_screenshot(page, tmp_path, "flow-run.png")

    # Cancel another run from its page: it ends at once.
    page.goto(f"{live_server.url}/admin/django_jobs/flowrun/order-1018/")
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Flow run order-1018 is canceled")
    expect(page.locator(".field-status .flows-status")).to_have_text("canceled")
    expect(page.locator("p.flows-run-error")).to_contain_text("canceled in the admin")
    assert get_run("order-1018").status == "canceled"  # type: ignore[union-attr]
    shots.append(screenshot(page, tmp_path / "flow-canceled.png"))
    context.close()

    # On a 420 px screen the timeline reads without scrolling sideways.
    narrow = browser.new_context(viewport={"width": 420, "height": 800})
    small = narrow.new_page()
    log_in(small, live_server.url, operator)
    small.goto(f"{live_server.url}/admin/django_jobs/flowrun/order-1017/")
    expect(small.locator(".flows-step-name")).to_have_count(4)
    no_sideways_scroll(small, 420)
    shots.append(screenshot(small, tmp_path / "flow-run-420.png"))
    # And the list: each run a card of labelled lines.
    small.goto(f"{live_server.url}/admin/django_jobs/flowrun/")
    expect(small.locator("th.field-call-id")).to_have_count(3)
    no_sideways_scroll(small, 420)
    shots.append(screenshot(small, tmp_path / "flows-420.png"))
    narrow.close()

    print("\nscreenshots:", *shots, sep="\n  ")
