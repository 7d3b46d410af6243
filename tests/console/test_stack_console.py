"""The console `make run` starts (LocalStack.start_console): its two logins made by the stack, opening enabled."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.config import ConsoleDev
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.console.sent_text import NOT_ENABLED
from tests.console.ledger_rows import lost_answer_notice
from tests.console.test_sent_text import opening, openings
from tests.console.test_story import text_of


@pytest.fixture(scope="module")
def stack_console(ledger_stack: LocalStack) -> Iterator[str]:
    """The session ledger's config with the console on a free port, its process started as `make run` starts it."""
    config = ledger_stack.config.model_copy(update={"console": ConsoleDev(port=free_port())})
    local = LocalStack(config, database_url=ledger_stack.database_url)
    local.start_postgres()  # the session's server, given: nothing started, nothing stopped
    try:
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
