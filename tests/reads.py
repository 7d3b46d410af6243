"""How tests read what a real stack did: ledger rows, a condition awaited, an intent awaited to its end,
the payloads of its histories decoded.

One copy for the integration, receipt and fault tiers (each file had its own `_rows`, `_eventually`,
`_final`). Every wait is bounded and says what it waited for when it gives up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.message import Channel
from herald.privacy.payload_codec import decode_in_place, payloads_in
from herald.temporal.client import payload_codec
from tests.keys import SESSION_KEYRING

T = TypeVar("T")

# How long a test waits for an intent to end under the test policy (its horizon is 20 s).
WAIT = 90.0


async def rows(pool: AsyncConnectionPool, sql: str, *params: Any) -> list[dict[str, Any]]:
    """The rows `sql` selects, each a dict by column name."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(sql, params)
        return await cursor.fetchall()


async def tuples(pool: AsyncConnectionPool, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows `sql` selects, each a tuple in column order."""
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchall()


async def scalar(pool: AsyncConnectionPool, sql: str, *params: Any) -> Any:
    """The first column of the one row `sql` selects."""
    (row,) = await tuples(pool, sql, *params)
    return row[0]


async def recipient_requests(pool: AsyncConnectionPool, recipient: str) -> list[dict[str, Any]]:
    """What the ledger recorded of `recipient`'s own requests (STOP, START, unsubscribes), in order."""
    return await rows(
        pool,
        "SELECT * FROM recipient_requests WHERE recipient_fingerprint = %s ORDER BY id",
        SESSION_KEYRING.recipient(recipient),
    )


async def eventually(check: Callable[[], Awaitable[T]], what: str, timeout: float = 60.0, every: float = 0.2) -> T:
    """`check()`'s first truthy answer, asked every `every` s; an AssertionError naming `what` after `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(every)


async def final(herald: HeraldClient, key: str, channel: Channel = Channel.SMS, wait: float = WAIT) -> IntentStatus:
    """The intent's status once it has ended, waited for at most `wait` s."""
    return await asyncio.wait_for(herald.wait(key, channel), wait)


async def decoded_payloads(temporal: Client, settings: Any, workflow_id: str) -> str:
    """Every payload of every run, as the codec server would show it (outer encryption removed)."""
    text = []
    async for execution in temporal.list_workflows(f'WorkflowId = "{workflow_id}"'):
        history = await temporal.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        await decode_in_place(history.events, payload_codec(settings.temporal.codec))
        # The payloads' own bytes (JSON text once decoded), not the history's JSON, where they are base64.
        text += [payload.data.decode("utf-8", "replace") for payload in payloads_in(history.events)]
    assert text, "the workflow has no run"
    return "\n".join(text)
