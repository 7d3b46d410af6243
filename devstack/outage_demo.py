"""The demo's short outage: the receipt server down and the relay refusing connections, for seconds.

While the receipt server is stopped (the ESP's event posts fail and wait in its redelivery) and the
relay refuses connections, two e-mails go out: one whose connection drops after DATA (the relay has
it; only its events can tell) and one that meets the refused relay. The scene reads the report
while the outage lasts (the e-mail waiting on a silent event stream, the one waiting on an
unreachable provider), then brings both back and lets each settle: one copy each at the relay.
"""

from __future__ import annotations

import asyncio
import secrets

import httpx
from psycopg_pool import AsyncConnectionPool

from devstack.demo import DemoRow, settle
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.message import Channel
from herald.ledger.report import ledger_report

# Long enough for the dropped e-mail's evidence window to close on a silent stream (the demo policy's
# window is 5 s), and for the refused one to be tried a few times; short enough for a demo.
OUTAGE_SECONDS = 8.0
_DATA = {"order_ref": "ord_outage", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}


async def play_outage(
    herald: HeraldClient, stack: LocalStack, ledger: AsyncConnectionPool, esp_url: str, policy: DeliveryPolicy
) -> tuple[list[DemoRow], list[str]]:
    """The scene's rows, and the report's outage lines as they read during the outage."""
    tag = secrets.token_hex(3)
    ambiguous = _row(tag, 1, "drop_after_data", "webhook down: no resend on silence")
    refused = _row(tag, 2, "relay refusing", "relay down: retried to the deadline")
    rows = [ambiguous, refused]
    async with httpx.AsyncClient(base_url=esp_url, timeout=10) as relay:
        (
            await relay.put(f"/_esp/faults/{ambiguous.recipient}", json={"fault": "drop_after_data", "count": 1})
        ).raise_for_status()
        stack.processes["receipts"].stop()
        try:
            await _send(herald, ambiguous)
            await _submit_answered(herald, ambiguous)  # its DATA reached the relay before the relay goes down
            (await relay.put("/_esp/outage", json={"seconds": OUTAGE_SECONDS})).raise_for_status()
            await _send(herald, refused)
            await asyncio.sleep(OUTAGE_SECONDS - 1)
            during = (await ledger_report(ledger, stream_lag=policy.event_stream_lag)).render().splitlines()
        finally:
            stack.start_receipts()
        await settle(herald, rows, timeout=policy.event_redelivery_period.total_seconds() + 60)
        for row in rows:
            row.messages_at_provider = row.live_messages = len(
                (await relay.get("/_esp/messages", params={"to": row.recipient})).json()["messages"]
            )
    lines = [line for line in during if line.startswith(("waiting on an unreachable provider", "event stream"))]
    return rows, lines


async def _submit_answered(herald: HeraldClient, row: DemoRow, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.1)):
        status = await herald.status(row.key, row.channel)
        if status.attempts and status.attempts[0].submit_result is not None:
            return
        await asyncio.sleep(0.1)


def _row(tag: str, n: int, fault: str, expectation: str) -> DemoRow:
    return DemoRow(
        key=f"order_receipt:outage_{tag}_{n}",
        template="order_receipt_email.v1",
        fault=fault,
        expectation=expectation,
        recipient=f"buyer.outage.{tag}.{n}@example.com",
        channel=Channel.EMAIL,
    )


async def _send(herald: HeraldClient, row: DemoRow) -> None:
    await herald.send({"business_key": row.key, "channel": "email", "recipient": row.recipient,
                       "template_id": "order_receipt_email", "template_version": 1, "render_data": _DATA})  # fmt: skip
