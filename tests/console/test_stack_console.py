"""The console `make run` starts (LocalStack.start_console): its three logins made by the stack, opening enabled,
the outbox's backlog read from the demo service's database (made by LocalStack.create_service_database, as `make run` makes it)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from devstack.config import ConsoleDev
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.console.sent_text import NOT_ENABLED
from tests.console.ledger_rows import lost_answer_notice
from tests.console.test_sent_text import opening, openings
from tests.console.test_story import text_of
from tests.intents import fresh_key, fresh_recipient


@pytest.fixture(scope="module")
def stack_console(ledger_stack: LocalStack) -> Iterator[str]:
    """The session ledger's config with the console on a free port, its process started as `make run` starts it."""
    config = ledger_stack.config.model_copy(update={"console": ConsoleDev(port=free_port())})
    local = LocalStack(config, database_url=ledger_stack.database_url)
    local.start_postgres()  # the session's server, given: nothing started, nothing stopped
    try:
        local.create_service_database()  # before the console, as `make run` orders them: its outbox login
        local.start_console()
        yield f"http://{config.console.host}:{config.console.port}"
    finally:
        local.stop()


async def test_the_stacks_console_opens_a_sent_text_and_records_the_opening(
    stack_console: str, pool: AsyncConnectionPool, reader_pool: AsyncConnectionPool
) -> None:
    """The stack's console process offers the form, answers it with the text, and records the opening."""
    seeded = await lost_answer_notice(pool)
    reason = f"demo ticket {secrets.token_hex(3)}"
    async with httpx.AsyncClient(base_url=stack_console, timeout=20, trust_env=False) as client:
        story = await client.get("/notice", params={"key": seeded.business_key})
        answer = await client.post("/notice/text", data=opening(seeded.sms, reason))
    assert story.status_code == 200 and "Open the text as sent" in story.text and NOT_ENABLED not in text_of(story.text)
    assert answer.status_code == 200, answer.text
    assert f"secret body for {seeded.phone}" in text_of(answer.text)
    assert await openings(reader_pool, seeded.sms) == [("loopback", reason, "opened")]


async def test_the_stacks_console_reads_the_outbox_backlog_as_a_login_that_cannot_read_a_notice(
    stack_console: str, ledger_stack: LocalStack
) -> None:
    """The stack's console counts the demo service's outbox on its routes page, over a login whose one grant is
    SELECT (state, created_at) on herald_outbox: reading a notice is refused to it."""
    config, server = ledger_stack.config, ledger_stack.database_url  # the console's state folder: same passwords
    assert server is not None
    phone = fresh_recipient()
    async with await psycopg.AsyncConnection.connect(config.outbox_database_url(server), autocommit=True) as service:
        await service.execute(
            "INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s)",
            (fresh_key("stack_outbox"), Jsonb({"channels": [{"channel": "sms", "recipient": phone}]})),
        )
        grants = await (await service.execute(
            "SELECT column_name, privilege_type FROM information_schema.column_privileges"
            " WHERE table_name = 'herald_outbox' AND grantee = 'herald_outbox_reader'"
        )).fetchall()  # fmt: skip
        whole_table = await (await service.execute(
            "SELECT privilege_type FROM information_schema.table_privileges WHERE grantee = 'herald_outbox_reader'"
        )).fetchall()  # fmt: skip
    async with httpx.AsyncClient(base_url=stack_console, timeout=30, trust_env=False) as client:
        answer = await client.get("/routes")
    assert answer.status_code == 200
    text = text_of(answer.text)
    found = re.search(r"outbox backlog (\d+) oldest unrelayed ([0-9.]+)s relayed (\d+) refused (\d+)", text)
    assert found is not None, text
    assert int(found.group(1)) >= 1 and "not configured" not in text
    assert phone not in answer.text and phone[1:] not in answer.text
    assert sorted(grants) == [("created_at", "SELECT"), ("state", "SELECT")] and whole_table == []
    async with await psycopg.AsyncConnection.connect(config.console_outbox_database_url(server)) as login:
        waiting = await (await login.execute("SELECT count(*) FROM herald_outbox WHERE state = 'pending'")).fetchone()
        assert waiting is not None and waiting[0] >= 1
        with pytest.raises(InsufficientPrivilege):
            await login.execute("SELECT notice FROM herald_outbox")
