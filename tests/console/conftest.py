"""The console tier: the console app in this process over the session's real ledger (PostgreSQL only).

The app is driven through httpx's ASGITransport on the test's own event loop (the psycopg pool
belongs to it; Starlette's TestClient would run the app on a loop of its own thread), as the login
the console runs as: a member of herald_reader (migration 022), read-only.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.stack import LocalStack
from herald.console.__main__ import console_pool, opener_pool, require_opener, require_reader
from herald.console.app import ReadBacklog, build_console
from herald.ledger.roles import CONSOLE_LOGIN, OPENER_LOGIN, OPENER_ROLE, READER_ROLE, ensure_app_login
from herald.settings import ConsoleSettings
from tests.keys import SESSION_KEYRING

CONSOLE = "http://127.0.0.1:8240"


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.import_plugin("tests.stack")


@pytest.fixture(scope="session")
def reader_url(ledger_stack: LocalStack) -> str:
    """The console's login on the session's ledger: a member of herald_reader."""
    assert ledger_stack.database_url is not None
    return ensure_app_login(ledger_stack.database_url, secrets.token_urlsafe(16), CONSOLE_LOGIN, READER_ROLE)


@pytest.fixture(scope="session")
async def reader_pool(reader_url: str) -> AsyncIterator[AsyncConnectionPool]:
    async with console_pool(reader_url, 5.0) as pool:
        await require_reader(pool)
        yield pool


@pytest.fixture(scope="session")
def opener_url(ledger_stack: LocalStack) -> str:
    """The console's second login on the session's ledger: a member of herald_text_opener (migration 024)."""
    assert ledger_stack.database_url is not None
    return ensure_app_login(ledger_stack.database_url, secrets.token_urlsafe(16), OPENER_LOGIN, OPENER_ROLE)


@pytest.fixture(scope="session")
async def opener(opener_url: str) -> AsyncIterator[AsyncConnectionPool]:
    async with opener_pool(opener_url, 5.0) as pool:
        await require_opener(pool)
        yield pool


def console_client(pool: AsyncConnectionPool, settings: ConsoleSettings | None = None, *,
                   peer: str = "127.0.0.1", base_url: str = CONSOLE, read_backlog: ReadBacklog | None = None,
                   **console: Any) -> httpx.AsyncClient:  # fmt: skip
    """A client of the console app over `pool`, its requests coming from `peer`; `console`: more of
    build_console's options (opener, routes, outbox, report_fresh_for)."""
    app = build_console(pool, SESSION_KEYRING, settings or ConsoleSettings(), "default", read_backlog=read_backlog,
                        **console)  # fmt: skip
    return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(peer, 50_000)), base_url=base_url)


@pytest.fixture
async def console(reader_pool: AsyncConnectionPool) -> AsyncIterator[httpx.AsyncClient]:
    """The console on loopback, as `make run` serves it."""
    async with console_client(reader_pool) as client:
        yield client
