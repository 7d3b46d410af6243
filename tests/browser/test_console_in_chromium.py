"""The console as an operator uses it, in headless Chromium: look a notice up by the person's number,
read its timeline, follow it into the Temporal Web UI, read a suppressed text's STOP, see an outage."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import BrowserContext, Page, expect
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowHandle

from tests.browser.conftest import screenshot_path
from tests.console.ledger_rows import Seeded, lost_answer_notice, stopped_marketing_text
from tests.intents import fresh_key

# A task queue no worker polls: the notice's workflow waits there, a run the Web UI can show.
IDLE_QUEUE = "console-browser-idle"


@pytest.fixture(scope="module")
async def notice(temporal: Client, pool: AsyncConnectionPool) -> AsyncIterator[tuple[Seeded, WorkflowHandle]]:
    """A two-channel notice in the ledger (a lost answer, a lookup, a report), its SMS workflow running in Temporal."""
    key = fresh_key("console_browser")
    handle = await temporal.start_workflow("NotificationWorkflow", id=f"{key}/sms", task_queue=IDLE_QUEUE)
    seeded = await lost_answer_notice(pool, business_key=key, first_run_id=handle.first_execution_run_id)
    try:
        yield seeded, handle
    finally:
        await handle.terminate("the browser tier is done with it")


@pytest.fixture
async def page(chromium: BrowserContext) -> AsyncIterator[Page]:
    opened = await chromium.new_page()
    try:
        yield opened
    finally:
        await opened.close()


async def test_an_operator_finds_a_notice_by_the_persons_number_and_reads_its_timeline(
    page: Page, console_url: str, notice: tuple[Seeded, WorkflowHandle]
) -> None:
    """Typing the number into the search box lists the person's notices, masked; the notice shows both channels' timelines."""
    seeded, _ = notice
    await page.goto(console_url)
    digits = seeded.phone[1:]
    await page.get_by_role("searchbox").fill(f"+{digits[0]} {digits[1:4]} {digits[4:7]} {digits[7:]}")
    await page.get_by_role("button", name="Find").click()
    await expect(page.locator("h1")).to_contain_text(f"{seeded.phone[:3]}•••{seeded.phone[-2:]}")
    assert page.url == f"{console_url}/find" and seeded.phone not in await page.content()
    await page.get_by_role("link", name=seeded.business_key).first.click()
    await expect(page.locator("h1")).to_contain_text(seeded.business_key)
    sms = page.locator('section[data-channel="sms"]')
    await expect(sms.locator(".verdict")).to_contain_text("delivered since")
    timeline = sms.locator('li[data-attempt="1"] table.events tbody tr')
    await expect(timeline).to_have_count(3)
    await expect(timeline.nth(0)).to_contain_text("unknown")
    await expect(timeline.nth(0)).to_contain_text("the answer was lost")
    await expect(timeline.nth(1)).to_contain_text("found")
    await expect(timeline.nth(2)).to_contain_text("delivered")
    await expect(timeline.nth(2)).to_contain_text("1.5 s before")
    await expect(page.locator('section[data-channel="email"] .verdict')).to_contain_text("delivered")
    assert seeded.phone not in await page.content() and seeded.address not in await page.content()
    await page.screenshot(path=screenshot_path("notice"), full_page=True)


async def test_the_notice_links_into_the_temporal_web_ui(
    page: Page, console_url: str, notice: tuple[Seeded, WorkflowHandle]
) -> None:
    """The story's first-run link opens that run in the Web UI, which names the workflow."""
    seeded, handle = notice
    await page.goto(f"{console_url}/notice?key={seeded.business_key}")
    link = page.locator('section[data-channel="sms"]').get_by_role("link", name="first run's history")
    await link.click()
    await page.wait_for_url(f"**/workflows/**/{handle.first_execution_run_id}/**")
    # The Web UI is a single-page app that fetches the workflow after its own start: on a loaded
    # machine its first render took longer than expect()'s 5 s once; the page's 20 s apply.
    await expect(page.get_by_text(seeded.sms).first).to_be_visible(timeout=20_000)
    await page.screenshot(path=screenshot_path("temporal-web-ui"))


async def test_a_suppressed_marketing_text_shows_the_stop_that_caused_it(
    page: Page, console_url: str, pool: AsyncConnectionPool
) -> None:
    """The business key typed in the search box opens the suppressed text, its verdict and the person's STOP."""
    seeded = await stopped_marketing_text(pool)
    await page.goto(console_url)
    await page.get_by_role("searchbox").fill(seeded.business_key)
    await page.keyboard.press("Enter")
    sms = page.locator('section[data-channel="sms"]')
    await expect(sms.locator(".verdict")).to_contain_text("suppressed")
    await expect(sms.locator(".verdict")).to_contain_text("opt_out (keyword STOP)")
    await expect(sms.locator("li.request")).to_contain_text("opt_out by inbound_keyword: keyword STOP")
    await page.screenshot(path=screenshot_path("suppressed-after-stop"), full_page=True)


async def test_an_outage_shows_on_the_routes_page(page: Page, console_url: str, pool: AsyncConnectionPool) -> None:
    """A provider whose last three submits found it unreachable is shown in outage, since the first, on /routes."""
    provider = f"gone-{secrets.token_hex(3)}"
    async with pool.connection() as conn:
        for n in range(3):
            await conn.execute(
                "INSERT INTO provider_marks (provider, mark, attempt_ref, marked_at) "
                "VALUES (%s, 'unreachable', %s, clock_timestamp() - %s * interval '1 second')",
                (provider, f"ref-{n}", 9 - 4 * n),
            )
    await page.goto(f"{console_url}/routes")
    row = page.locator(f'tr[data-provider="{provider}"]')
    await expect(row).to_contain_text("in outage since")
    await expect(page.locator("svg.chart")).to_have_count(2)
    await page.screenshot(path=screenshot_path("routes"), full_page=True)


async def test_a_list_filtered_by_tenant_pages_older(
    page: Page, console_url: str, notice: tuple[Seeded, WorkflowHandle]
) -> None:
    """The filter form narrows the list to a tenant; each row opens its notice."""
    seeded, _ = notice
    await page.goto(f"{console_url}/intents")
    await page.locator('input[name="tenant"]').fill(seeded.tenant)
    await page.locator('select[name="channel"]').select_option("sms")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator(f'tr[data-workflow="{seeded.sms}"]')).to_be_visible()
    await page.screenshot(path=screenshot_path("intents"), full_page=True)
    await page.locator(f'tr[data-workflow="{seeded.sms}"]').get_by_role("link").click()
    await expect(page.locator("h1")).to_contain_text(seeded.business_key)
