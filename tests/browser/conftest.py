"""The browser tier: the console served over HTTP on 127.0.0.1, driven in headless Chromium by Playwright.

The browser is the one HERALD_TEST_CHROMIUM names, else the system's Chromium (Debian's `chromium`
package: /usr/bin/chromium, which `.ci/run` installs where it is missing: CI does not reach
Playwright's CDN), else Playwright's own (`python -m playwright install chromium`, on a machine
that reaches its CDN). It runs with a fresh profile, no sandbox (CI containers run as root), no GPU and
nothing it would fetch on its own. The console reads the session's real ledger as herald_reader;
its Temporal links point at the session's Temporal dev server and its Web UI.

Screenshots of the pages the tests read are saved in HERALD_SCREENSHOT_DIR (default:
.state/console-screenshots/, ignored by git); README's are in docs/console/.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn
from playwright.async_api import BrowserContext, async_playwright
from psycopg_pool import AsyncConnectionPool
from starlette.types import ASGIApp

from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.console.app import build_console
from herald.settings import ConsoleSettings
from tests.console.conftest import reader_pool, reader_url  # noqa: F401 (the console tier's fixtures, shared)
from tests.keys import SESSION_KEYRING

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMED = os.environ.get("HERALD_TEST_CHROMIUM")
SYSTEM_CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
SCREENSHOTS = Path(os.environ.get("HERALD_SCREENSHOT_DIR") or REPO_ROOT / ".state" / "console-screenshots")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.import_plugin("tests.stack")


@pytest.fixture(scope="session")
async def chromium(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BrowserContext]:
    """Headless Chromium with a fresh profile, one window of 1400 x 900."""
    chromium = Path(NAMED) if NAMED else SYSTEM_CHROMIUM if os.access(SYSTEM_CHROMIUM, os.X_OK) else None
    if chromium is not None and not os.access(chromium, os.X_OK):
        pytest.fail(f"HERALD_TEST_CHROMIUM names no executable: {chromium}")
    async with async_playwright() as playwright:
        if chromium is None and not Path(playwright.chromium.executable_path).exists():
            pytest.fail("no Chromium: apt-get install chromium, or python -m playwright install chromium, "
                        "or set HERALD_TEST_CHROMIUM to one")  # fmt: skip
        context = await playwright.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"), executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )  # fmt: skip
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            await context.close()


@pytest.fixture(scope="session")
async def console_url(stack: LocalStack, reader_pool: AsyncConnectionPool) -> AsyncIterator[str]:  # noqa: F811
    """The console served by uvicorn on a free loopback port, linking into the session's Web UI."""
    port = free_port()
    t = stack.config.temporal
    settings = ConsoleSettings(port=port, temporal_ui_url=f"http://{t.host}:{t.ui_port}")
    async with served(build_console(reader_pool, SESSION_KEYRING, settings, t.namespace), port) as url:
        yield url


@asynccontextmanager
async def served(app: ASGIApp, port: int) -> AsyncIterator[str]:
    """`app` under uvicorn on 127.0.0.1:`port`, its base URL once it listens; stopped on exit."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, proxy_headers=False)
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)


def screenshot_path(name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"
