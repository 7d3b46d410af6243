"""make run's one-click scene against the session's stack: the link from the promotion the ESP received
is fetched and then posted, the next promotion to that address is suppressed with nothing at the ESP,
and the order receipt still goes. The session's worker signs links and its receipt server verifies them
(the stack's unsubscribe key, devstack/config.py)."""

from __future__ import annotations

import asyncio
import secrets

from psycopg_pool import AsyncConnectionPool

from devstack.demo import a_one_click_unsubscribe_stops_marketing_email
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from tests.stack import Esp


def _header(message: dict[str, object], name: str) -> str | None:
    headers = message["headers"]
    assert isinstance(headers, list)
    return next((value for key, value in headers if key.lower() == name.lower()), None)


async def test_the_demo_s_one_click_unsubscribe_suppresses_the_next_promotion(
    herald: HeraldClient, esp: Esp, pool: AsyncConnectionPool
) -> None:
    """The rows end delivered, suppressed by the unsubscribe and delivered, with 1, 0 and 1 messages at the ESP;
    the GET recorded nothing and the POST one one-click unsubscribe; the ESP holds the first promotion (with
    the header pair, its link https://) and the receipt (without), nothing more."""
    rows = await asyncio.wait_for(
        a_one_click_unsubscribe_stops_marketing_email(herald, esp.base_url, pool, secrets.token_hex(5)), 150
    )
    assert [row.template for row in rows] == ["class_promo_email.v1", "class_promo_email.v1", "order_receipt_email.v2"]
    first, second, receipt = rows
    assert [row.state for row in rows] == [IntentState.DELIVERED, IntentState.SUPPRESSED, IntentState.DELIVERED]
    assert [row.messages_at_provider for row in rows] == [1, 0, 1]
    assert [row.live_messages for row in rows] == [1, 0, 1]
    assert "link GET 200 'Unsubscribe?' (0 unsubscribes recorded)" in first.note, first.note
    assert "POST One-Click 200 'You are unsubscribed' (recorded: one_click)" in first.note, first.note
    assert "suppressed: unsubscribe (one-click unsubscribe link)" in second.note, second.note
    assert second.note.endswith("the ESP holds 2 messages to the address in all"), second.note
    assert receipt.note == "  same address, transactional: List-Unsubscribe on 0 of its 1 copies", receipt.note

    promotion, sent_receipt = await esp.messages(first.recipient)
    assert promotion["subject"] == "New at the studio: Spin 18:00"
    assert _header(promotion, "List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"
    assert (_header(promotion, "List-Unsubscribe") or "").startswith("<https://")  # RFC 8058: never http://
    assert sent_receipt["subject"].startswith("Your receipt for order ")
    assert _header(sent_receipt, "List-Unsubscribe") is None
