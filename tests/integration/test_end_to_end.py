"""One SMS intent end to end through the real Temporal, PostgreSQL, emulator and receipt server."""

from __future__ import annotations

import asyncio

from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.ledger.store import intent_history
from herald.lifecycle import IntentState
from tests.conftest import Emulator, fresh_key, fresh_recipient, receipt_request

WAIT = 60


async def test_happy_path_is_delivered_by_report(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """An intent is accepted, then delivered by the provider's report, and the ledger shows each step in order."""
    key, to = fresh_key(), fresh_recipient()
    receipt = await herald.send(receipt_request(key, to))
    final = await asyncio.wait_for(herald.wait(key), WAIT)
    assert final.state is IntentState.DELIVERED
    messages = await emulator.messages(to)
    assert len(messages) == 1
    history = await intent_history(pool, receipt.workflow_id)
    assert [(t["from_state"], t["to_state"]) for t in history["transitions"]] == [
        ("pending", "submitting"),
        ("submitting", "accepted"),
        ("accepted", "delivered"),
    ]
    assert history["transitions"][-1]["source"] == "report"
    assert [t["seq"] for t in history["transitions"]] == [1, 2, 3]
    assert len(history["attempts"]) == 1
