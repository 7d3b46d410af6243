"""What the demo's scenes report: one row per intent, counted at the emulators and settled in Temporal."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.lifecycle import IntentState
from herald.core.message import Channel

# A message that ended in one of these was never delivered; a retry after it is not a duplicate.
_DEFINITE_FAILURES = frozenset({"failed", "undelivered", "canceled"})
# A class the scenes' reminders and promotions are about.
CLASS = {"class_name": "Spin 18:00", "starts_at": "Mon 18:00"}


@dataclass
class DemoRow:
    """One intent of the demo: what it was, the fault it met, and what came of it."""

    key: str
    template: str
    fault: str | None
    expectation: str
    recipient: str
    channel: Channel = Channel.SMS
    state: IntentState | None = None
    attempts: int = 0
    messages_at_provider: int = 0
    # Messages not ended failed/undelivered: more than one of these for an intent is a duplicate.
    live_messages: int = 0
    closed_by: str | None = None
    # A report e-mail: whether the attachment the relay received hashes to the stored artifact.
    attachment_verified: bool | None = None
    # What the send policy did to it (deferred until ..., suppressed by ...), from the ledger.
    note: str = ""
    # Set where two rows share a recipient: their messages at the emulator are told apart by body.
    content_sha256: str | None = None
    # False for the priority scene's batch: counted in the totals, summed up in the urgent row.
    in_table: bool = True


def count_messages(row: DemoRow, listed: list[dict[str, Any]]) -> None:
    """The row's messages at the emulator, and those not ended failed or undelivered."""
    row.messages_at_provider = len(listed)
    row.live_messages = sum(m["status"] not in _DEFINITE_FAILURES for m in listed)


def phone() -> str:
    """A fresh number in the 555 range the demo and its emulator use."""
    return "+1555" + f"{secrets.randbelow(10**7):07d}"


async def notes(ledger: AsyncConnectionPool, rows: list[DemoRow]) -> None:
    """Each row's first policy observation (deferred until ..., suppressed by ...), as its note."""
    async with ledger.connection() as conn:
        for row in rows:
            cursor = await conn.execute(
                """SELECT kind, reason FROM observations WHERE workflow_id = %s AND source = 'policy' ORDER BY seq LIMIT 1""",
                (f"{row.key}/{row.channel.value}",),
            )
            found = await cursor.fetchone()
            if found is not None:
                row.note = f"  {found[0]}: {found[1]}"


async def settle(herald: HeraldClient, rows: list[DemoRow], timeout: float) -> list[IntentStatus]:
    """Wait for every row's intent to close (at most `timeout` seconds); each row gets its outcome."""
    finals = await asyncio.wait_for(asyncio.gather(*(herald.wait(row.key, row.channel) for row in rows)), timeout)
    for row, final in zip(rows, finals, strict=True):
        row.state, row.attempts, row.closed_by = final.state, len(final.attempts), final.closed_by
    return finals
