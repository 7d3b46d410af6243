"""What a recipient asks of us directly suppresses at once, through the real policy gate: an opt-out
stops the next intent to them with nothing sent (counted at the emulator), an opt-in lets the one
after through, an unsubscribe stops only its own category, and a request recorded twice is one row."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta

from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.send_policy import Category
from herald.ledger.policy_store import standing
from herald.ledger.recipient_requests import RecipientRequest, record_requests, requests_of
from herald.ledger.report import ledger_report
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import Emulator


def _request(to: str, request: str, *, category: Category | None = None, ref: str | None = None) -> RecipientRequest:
    return RecipientRequest(
        fingerprint=SESSION_KEYRING.recipient(to), channel="sms", request=request, category=category,
        source="inbound_keyword", detail=f"keyword {request}", source_ref=ref or f"SM{secrets.token_hex(16)}",
        requested_at=datetime.now(UTC),
    )  # fmt: skip


async def test_an_opt_out_suppresses_the_next_intent_and_an_opt_in_lifts_it(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    to = fresh_recipient()
    stop = _request(to, "opt_out")
    async with pool.connection() as conn:
        assert await record_requests(conn, [stop, stop, stop]) == 1  # posted three times: one request
    blocked = fresh_key()
    await herald.send(receipt_request(blocked, to))
    final = await asyncio.wait_for(herald.wait(blocked), 60)
    assert final.state is IntentState.SUPPRESSED
    assert "opt_out (keyword opt_out)" in final.transitions[-1].reason
    assert await emulator.messages(to) == []

    async with pool.connection() as conn:
        await record_requests(conn, [_request(to, "opt_in")])
    allowed = fresh_key()
    await herald.send(receipt_request(allowed, to))
    assert (await asyncio.wait_for(herald.wait(allowed), 60)).state is IntentState.DELIVERED
    assert len(await emulator.messages(to)) == 1
    async with pool.connection() as conn:
        recorded = await requests_of(conn, [SESSION_KEYRING.recipient(to)])
    assert [r.request for r in recorded] == ["opt_in", "opt_out"]
    # Seen by operators: the report counts them by kind and source, with the time of the last.
    counts = {(c.request, c.source, c.channel): c for c in (await ledger_report(pool)).consent}
    assert counts[("opt_out", "inbound_keyword", "sms")].count >= 1
    assert counts[("opt_in", "inbound_keyword", "sms")].last_at >= stop.requested_at


async def test_an_unsubscribe_stops_its_own_category_only(pool: AsyncConnectionPool) -> None:
    to = fresh_recipient()
    async with pool.connection() as conn:
        await record_requests(conn, [_request(to, "unsubscribe", category=Category.MARKETING)])
        later = datetime.now(UTC) + timedelta(seconds=1)
        marketing = await standing(conn, at=later, recipient=to, channel="sms", category=Category.MARKETING,
                                   workflow_id="x", fps=SESSION_KEYRING.recipient_candidates(to))  # fmt: skip
        receipts = await standing(conn, at=later, recipient=to, channel="sms", category=Category.TRANSACTIONAL,
                                  workflow_id="x", fps=SESSION_KEYRING.recipient_candidates(to))  # fmt: skip
    assert [cause for cause, _, _ in marketing.suppressions] == ["unsubscribe"]
    assert receipts.suppressions == []
