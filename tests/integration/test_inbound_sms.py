"""A reply closes the consent loop through the real stack: the emulator plays a handset texting our
number (Twilio's keyword handling and a signed post to /twilio/inbound), the receipt server records
the request, and the policy gate reads it at the next attempt.

STOP suppresses the next marketing text to that number with nothing sent (counted at the emulator,
which also blocks the pair as Twilio does); START lets the one after through; HELP is recorded and
suppresses nothing. The ledger keeps the fingerprint and the classification, never the number or
the words.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.receipts.twilio_inbound import EMPTY_TWIML
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.stack import Emulator, consented_to_marketing

WAIT = 60
PROMOTION = {
    "template_id": "class_promotion",
    "template_version": 1,
    "render_data": {"class_name": "Spin 18:00", "starts_at": "Mon 18:00"},
}


async def text_us(emulator: Emulator, receipts_url: str, handset: str, body: str, **fields: Any) -> dict[str, Any]:
    """The handset texts our number: the emulator's answer, with what our webhook said."""
    async with httpx.AsyncClient(base_url=emulator.base_url, timeout=20, trust_env=False) as http:
        response = await http.post(
            "/_emulator/inbound",
            json={"from": handset, "body": body, "url": f"{receipts_url}/twilio/inbound", **fields},
        )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def promote(herald: HeraldClient, to: str) -> IntentState:
    key = fresh_key("class_promotion")
    await herald.send(receipt_request(key, to, **PROMOTION))
    return (await asyncio.wait_for(herald.wait(key), WAIT)).state


async def test_stop_suppresses_the_next_marketing_text_and_start_lets_the_one_after_through(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, receipt_server: str
) -> None:
    """A consenting recipient texts STOP (posted five times): one opt_out row, the next promotion is
    suppressed with 0 messages at the emulator; START: the one after is delivered."""
    to = await consented_to_marketing(pool, fresh_recipient())
    stop = await text_us(emulator, receipt_server, to, "STOP")
    assert stop["webhook"]["http_status"] == 200 and stop["webhook"]["answer"] == EMPTY_TWIML
    assert stop["blocked"] is True  # Twilio's own block, which the emulator keeps too
    for _ in range(4):  # Twilio's retries of the same message
        again = await text_us(emulator, receipt_server, to, "STOP", message_sid=stop["message_sid"])
        assert again["webhook"]["http_status"] == 200
    assert [(r["request"], r["detail"]) for r in await reads.recipient_requests(pool, to)] == [("opt_out", "keyword STOP")]

    assert await promote(herald, to) is IntentState.SUPPRESSED
    assert await emulator.messages(to) == []

    start = await text_us(emulator, receipt_server, to, "start")
    assert start["webhook"]["http_status"] == 200 and start["blocked"] is False
    assert await promote(herald, to) is IntentState.DELIVERED
    assert len(await emulator.messages(to)) == 1

    rows = await reads.recipient_requests(pool, to)
    assert [r["request"] for r in rows] == ["opt_out", "opt_in"]
    stored = json.dumps(rows, default=str)
    assert to not in stored and to.lstrip("+") not in stored  # the number nowhere; the words: the keyword only


async def test_help_is_recorded_and_the_next_marketing_text_still_goes(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, receipt_server: str
) -> None:
    """HELP is a request on record, not an opt-out: the next promotion is delivered."""
    to = await consented_to_marketing(pool, fresh_recipient())
    helped = await text_us(emulator, receipt_server, to, "HELP")
    assert helped["webhook"]["http_status"] == 200 and helped["blocked"] is False
    assert [(r["request"], r["detail"]) for r in await reads.recipient_requests(pool, to)] == [("help", "keyword HELP")]
    assert await promote(herald, to) is IntentState.DELIVERED
    assert len(await emulator.messages(to)) == 1


async def test_stop_please_is_a_conversation_and_suppresses_nothing(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, receipt_server: str
) -> None:
    """'stop please' is a conversation: recorded as other, neither Twilio nor Herald blocks."""
    to = await consented_to_marketing(pool, fresh_recipient())
    chat = await text_us(emulator, receipt_server, to, "stop please")
    assert chat["webhook"]["http_status"] == 200 and chat["blocked"] is False
    assert [r["request"] for r in await reads.recipient_requests(pool, to)] == ["other"]
    assert await promote(herald, to) is IntentState.DELIVERED
