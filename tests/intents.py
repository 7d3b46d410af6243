"""Intent requests for tests of every tier: fresh keys, recipients and addresses, and requests built from them."""

from __future__ import annotations

import secrets
from typing import Any

ORDER_DATA: dict[str, str | int] = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}
# A notice's channel entries (herald.intake.notice), one per channel, for the same order.
SMS_ENTRY: dict[str, Any] = {
    "channel": "sms",
    "recipient": "+15551230001",
    "template_id": "order_receipt",
    "template_version": 1,
    "render_data": ORDER_DATA,
}
EMAIL_ENTRY = {**SMS_ENTRY, "channel": "email", "recipient": "seller@example.com", "template_id": "order_receipt_email"}


def email_request(key: str, to: str, **overrides: Any) -> dict[str, Any]:
    """An order-receipt e-mail intent request for `key` and `to`; overrides replace its fields."""
    return {
        "business_key": key,
        "channel": "email",
        "recipient": to,
        "template_id": "order_receipt_email",
        "template_version": 1,
        "render_data": ORDER_DATA,
        **overrides,
    }


def fresh_address() -> str:
    """A random address, so each test's faults and messages are its own."""
    return f"member.{secrets.token_hex(5)}@example.com"


def fresh_recipient() -> str:
    """A random +1 555 number, so each test's faults and messages are its own."""
    return "+1555" + "".join(secrets.choice("0123456789") for _ in range(7))


def fresh_key(event: str = "order_receipt") -> str:
    return f"{event}:t_{secrets.token_hex(6)}"


def receipt_request(key: str, to: str, **overrides: Any) -> dict[str, Any]:
    return {
        "business_key": key,
        "recipient": to,
        "template_id": "order_receipt",
        "template_version": 1,
        "render_data": {"order_ref": "ord_84721", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"},
        **overrides,
    }
