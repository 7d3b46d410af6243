"""The console's gate and its login, on the real ledger: nothing answered to a stranger, nothing written, no person read."""

from __future__ import annotations

import asyncio
import os
import sys

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.processes import free_port, wait_for_port
from herald.console.__main__ import console_pool, require_reader, serve
from herald.settings import ConsoleSettings, InvalidSetting
from tests.console.conftest import console_client
from tests.console.ledger_rows import lost_answer_notice
from tests.keys import SESSION_FINGERPRINT_KEYS

# What the process needs beside its login: the session's fingerprint keys.
CONSOLE_ENV = {"HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS)}


@pytest.mark.parametrize("path", ["/", "/notice?key=x", "/find?q=x", "/console.css", "/no-such-page"])
async def test_a_stranger_gets_nothing_but_the_refusal(reader_pool: AsyncConnectionPool, path: str) -> None:
    """From beyond loopback, every path (an unknown one too) is 403 before any page runs."""
    async with console_client(reader_pool, peer="192.0.2.7") as client:
        answer = await client.get(path)
    assert answer.status_code == 403
    assert answer.text == "the console answers this machine only (loopback)"


async def test_with_a_token_only_the_bearer_reads_and_is_named_on_the_page(reader_pool: AsyncConnectionPool) -> None:
    """A token configured: 401 with a Bearer challenge without it, the page with it."""
    async with console_client(reader_pool, ConsoleSettings(token="console-t0ken"), peer="192.0.2.7") as client:
        refused = await client.get("/")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        answer = await client.get("/", headers={"Authorization": "Bearer console-t0ken"})
    assert answer.status_code == 200
    assert "<strong>token</strong>" in answer.text


async def test_behind_the_proxy_the_operator_it_signed_in_is_shown(reader_pool: AsyncConnectionPool) -> None:
    """From a trusted proxy the header names the operator (escaped); the same header from elsewhere is 401."""
    settings = ConsoleSettings(auth_header="x-auth-request-email", trusted_proxies=("10.1.2.3/32",),
                               allowed_hosts=("console.example.com",))  # fmt: skip
    headers = {"X-Auth-Request-Email": "<b>ops</b>@example.com"}
    async with console_client(reader_pool, settings, peer="10.1.2.3", base_url="http://console.example.com") as client:
        answer = await client.get("/", headers=headers)
    assert answer.status_code == 200
    assert "&lt;b&gt;ops&lt;/b&gt;@example.com" in answer.text and "<b>ops</b>" not in answer.text
    async with console_client(reader_pool, settings, peer="10.1.2.4", base_url="http://console.example.com") as client:
        assert (await client.get("/", headers=headers)).status_code == 401


async def test_the_consoles_login_reads_no_person_and_writes_nothing(
    reader_pool: AsyncConnectionPool, pool: AsyncConnectionPool
) -> None:
    """As herald_reader: the recipient and body columns are refused, an INSERT is refused, the story's columns read."""
    seeded = await lost_answer_notice(pool)
    async with reader_pool.connection() as conn:
        for statement in ("SELECT recipient FROM intents LIMIT 1", "SELECT body FROM intents LIMIT 1",
                          "SELECT recipient FROM suppression_evidence LIMIT 1", "SELECT * FROM recipient_keys LIMIT 1"):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                async with conn.transaction():
                    await conn.execute(statement)
        with pytest.raises((psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)):
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO provider_marks (provider, mark, attempt_ref) VALUES ('twilio', 'probe', 'x')"
                )
        cursor = await conn.execute("SELECT tenant FROM intents WHERE workflow_id = %s", (seeded.sms,))
        assert await cursor.fetchone() == ("acme",)


async def test_the_console_refuses_to_start_on_a_login_that_may_write(settings: object) -> None:
    """The services' login (herald_app) given as the console's is one line naming HERALD_CONSOLE_DATABASE_URL."""
    url = settings.database_url.get_secret_value()  # type: ignore[attr-defined]
    async with console_pool(url, 5.0) as app_pool:
        with pytest.raises(InvalidSetting) as raised:
            await require_reader(app_pool)
    assert str(raised.value).startswith("HERALD_CONSOLE_DATABASE_URL: must be a login of herald_reader (migration 022)")


async def test_python_m_herald_console_serves_on_loopback_and_says_where(reader_url: str) -> None:
    """The process serves the console on the configured loopback port and logs its address; it stops on SIGTERM."""
    port = free_port()
    env = {**os.environ, **CONSOLE_ENV, "HERALD_CONSOLE_DATABASE_URL": reader_url, "HERALD_CONSOLE_PORT": str(port)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "herald.console",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await asyncio.to_thread(wait_for_port, "127.0.0.1", port, 30)
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/")
        assert answer.status_code == 200 and "Find a notice" in answer.text
    finally:
        process.terminate()
        output = (await asyncio.wait_for(process.communicate(), 15))[0].decode()
    assert f"console serving http://127.0.0.1:{port}/" in output


@pytest.mark.parametrize("login", [None, "services"])
async def test_without_a_reader_login_the_console_does_not_start(
    settings: object, login: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No console login, or the services' login in its place: refused in one line naming the variable, nothing served."""
    for name in [name for name in os.environ if name.startswith("HERALD_")]:
        monkeypatch.delenv(name)
    for name, value in CONSOLE_ENV.items():
        monkeypatch.setenv(name, value)
    if login == "services":
        monkeypatch.setenv("HERALD_CONSOLE_DATABASE_URL", settings.database_url.get_secret_value())  # type: ignore[attr-defined]
    with pytest.raises(InvalidSetting) as raised:
        await serve()
    said = "required: a login of herald_reader" if login is None else "must be a login of herald_reader"
    assert str(raised.value).startswith(f"HERALD_CONSOLE_DATABASE_URL: {said}")
