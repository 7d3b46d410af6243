"""Opening a notice's sent text in headless Chromium: the form on the story, a reason typed, the text shown and recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import BrowserContext, expect
from psycopg_pool import AsyncConnectionPool

from devstack.processes import free_port
from herald.console.app import build_console
from herald.settings import ConsoleSettings
from tests.browser.conftest import screenshot_path, served
from tests.console.ledger_rows import lost_answer_notice
from tests.console.conftest import opener, opener_url  # noqa: F401 (the console tier's opener login, shared)
from tests.keys import SESSION_KEYRING


@pytest.fixture(scope="module")
async def opening_console(
    reader_pool: AsyncConnectionPool,
    opener: AsyncConnectionPool,  # noqa: F811
) -> AsyncIterator[str]:
    """The console with opening enabled, served by uvicorn on a free loopback port (no Temporal needed)."""
    port = free_port()
    app = build_console(reader_pool, SESSION_KEYRING, ConsoleSettings(port=port), "default", opener=opener)
    async with served(app, port) as url:
        yield url


async def test_an_operator_opens_the_text_as_sent_with_a_reason(
    chromium: BrowserContext, opening_console: str, pool: AsyncConnectionPool, reader_pool: AsyncConnectionPool
) -> None:
    """On the story, the SMS channel's form takes a reason; the answer shows the body and who opened it; the story then lists the opening."""
    seeded = await lost_answer_notice(pool)
    page = await chromium.new_page()
    try:
        await page.goto(f"{opening_console}/notice?key={seeded.business_key}")
        sms = page.locator('section[data-channel="sms"]')
        await sms.get_by_role("textbox").fill("ticket 4711: customer asks what we sent")
        await sms.get_by_role("button", name="Open the text as sent").click()
        await expect(page.locator("pre.sent-body")).to_have_text(f"secret body for {seeded.phone}")
        await expect(page.locator(".opened-stamp")).to_contain_text("opened by loopback at")
        await page.screenshot(path=screenshot_path("text-as-sent"), full_page=True)
        await page.get_by_role("link", name="← the notice's story").click()
        opening = page.locator('section[data-channel="sms"] table.openings tr.opening')
        await expect(opening).to_have_count(1)
        await expect(opening).to_contain_text("ticket 4711: customer asks what we sent")
    finally:
        await page.close()
    async with reader_pool.connection() as conn:
        cursor = await conn.execute("SELECT outcome FROM text_openings WHERE workflow_id = %s", (seeded.sms,))
        assert await cursor.fetchall() == [("opened",)]
