"""The demo's one-click unsubscribe scene: a marketing e-mail's List-Unsubscribe link, followed as a
mail client follows it, stops the next promotion and nothing else."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from psycopg_pool import AsyncConnectionPool

from devstack.demo_rows import CLASS, DemoRow, notes, settle
from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.message import Channel
from herald.core.send_policy import Category
from herald.ledger.policy_store import grant_consent
from herald.ledger.recipient_requests import requests_of
from herald.privacy.unsubscribe import HEADER as LIST_UNSUBSCRIBE
from herald.providers.sendgrid_events import REFERENCE_ARG

# The one-click scene's promotion and receipt: e-mail templates (the promotion is marketing, so the
# SMTP adapter gives it the List-Unsubscribe pair; the receipt is transactional and has none).
_EMAIL_PROMOTION = ("class_promo_email", 1)
_EMAIL_RECEIPT = ("order_receipt_email", 2)


async def a_one_click_unsubscribe_stops_marketing_email(
    herald: HeraldClient, esp_url: str, ledger: AsyncConnectionPool, run_tag: str, timeout: float = 60.0
) -> list[DemoRow]:
    """A member who agreed to marketing gets a promotion by e-mail. The link in its List-Unsubscribe
    header, read from the message the ESP received as a mail client reads it, is fetched (GET: the
    confirmation page, nothing recorded), then POSTed ``List-Unsubscribe=One-Click`` as RFC 8058
    clients do. The next promotion to the address is suppressed with nothing sent; an order receipt
    to it is still delivered.

    Rows count their messages at the ESP by the attempt references the copies carry (unique_args),
    so a suppressed promotion that got out anyway would show on its own row."""
    address = f"member.{run_tag}@example.com"
    await grant_consent(ledger, fingerprint=herald.keyring.recipient(address), category=Category.MARKETING,
                        source="demo: signup form", granted_at=datetime.now(UTC))  # fmt: skip
    first, second = (
        DemoRow(f"class_promo_email:unsub_{run_tag}_{n}", "class_promo_email.v1", None, expectation, address,
                Channel.EMAIL)
        for n, expectation in enumerate(["marketing e-mail, one-click link", "after the one-click POST"])
    )  # fmt: skip
    receipt = DemoRow(f"order_receipt:unsub_{run_tag}", "order_receipt_email.v2", None,
                      "unsubscribed from marketing only", address, Channel.EMAIL)  # fmt: skip
    async with (
        httpx.AsyncClient(base_url=esp_url, timeout=10) as relay,
        httpx.AsyncClient(timeout=10, trust_env=False) as mail_client,  # the link is the local receipt server's
    ):
        await _send_email(herald, first, _EMAIL_PROMOTION, CLASS)
        sent = await settle(herald, [first], timeout)
        listed = await _esp_messages(relay, address)
        link = _one_click_link(listed[0]["headers"]) if listed else None
        if link is None:
            first.note = "  no http(s) List-Unsubscribe link on a message the ESP received: the scene stops here"
            _count_at_esp(listed, [first], sent)
            return [first]
        page = await mail_client.get(over_loopback(link))
        recorded_after_get = await _unsubscribes(herald, ledger, address)
        answer = await mail_client.post(over_loopback(link), data={"List-Unsubscribe": "One-Click"})
        recorded_after_post = await _unsubscribes(herald, ledger, address)
        first.note = (
            f"  link GET {page.status_code} '{_title(page.text)}' ({len(recorded_after_get)} unsubscribes recorded), "
            f"POST One-Click {answer.status_code} '{_title(answer.text)}' "
            f"(recorded: {', '.join(recorded_after_post) or 'nothing'})"
        )
        await _send_email(herald, second, _EMAIL_PROMOTION, CLASS)
        data = {"order_ref": f"ord_{run_tag}_u", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
        await _send_email(herald, receipt, _EMAIL_RECEIPT, data)
        finals = sent + await settle(herald, [second, receipt], timeout)
        listed = await _esp_messages(relay, address)
    rows = [first, second, receipt]
    *_, receipt_copies = _count_at_esp(listed, rows, finals)
    await notes(ledger, [second])
    second.note += f"; the ESP holds {len(listed)} messages to the address in all"
    links = sum(_one_click_link(m["headers"]) is not None for m in receipt_copies)
    receipt.note = f"  same address, transactional: List-Unsubscribe on {links} of its {len(receipt_copies)} copies"
    return rows


async def _send_email(herald: HeraldClient, row: DemoRow, template: tuple[str, int], data: dict[str, Any]) -> None:
    template_id, version = template
    await herald.send({"business_key": row.key, "channel": "email", "recipient": row.recipient,
                       "template_id": template_id, "template_version": version, "render_data": data})  # fmt: skip


async def _esp_messages(relay: httpx.AsyncClient, address: str) -> list[dict[str, Any]]:
    """Every message the ESP emulator accepted for `address`, oldest first."""
    response = await relay.get("/_esp/messages", params={"to": address})
    response.raise_for_status()
    return response.json()["messages"]


_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def over_loopback(link: str) -> str:
    """An https:// link to a loopback host as the local stack serves it: the same host, port and path over
    plain HTTP. Herald writes only https:// unsubscribe links (RFC 8058); the stack's receipt server has no
    TLS proxy in front of it, so the demo's mail client stands where that proxy would. Any other link is
    called as it is."""
    parts = urlsplit(link)
    if parts.scheme == "https" and parts.hostname in _LOOPBACK_HOSTS:
        return urlunsplit(parts._replace(scheme="http"))
    return link


def _one_click_link(headers: list[list[str]]) -> str | None:
    """The first http(s) URL of the List-Unsubscribe header, the one RFC 8058 clients POST to."""
    value = next((value for name, value in headers if name.lower() == LIST_UNSUBSCRIBE.lower()), "")
    return next((url for url in re.findall(r"<([^<>]+)>", value) if url.startswith(("https://", "http://"))), None)


async def _unsubscribes(herald: HeraldClient, ledger: AsyncConnectionPool, address: str) -> list[str]:
    """The e-mail unsubscribes the ledger holds for `address` (any of its fingerprints), by source."""
    async with ledger.connection() as conn:
        recorded = await requests_of(conn, herald.keyring.recipient_candidates(address), "email")
    return [r.source for r in recorded if r.request == "unsubscribe"]


def _title(page: str) -> str:
    found = re.search(r"<title>([^<]*)</title>", page)
    return found.group(1) if found else "?"


def _count_at_esp(
    listed: list[dict[str, Any]], rows: list[DemoRow], finals: list[IntentStatus]
) -> list[list[dict[str, Any]]]:
    """Each row's messages among `listed` (those carrying one of its attempts' references), counted on the row."""
    copies = []
    for row, final in zip(rows, finals, strict=True):
        refs = {attempt.attempt_ref for attempt in final.attempts}
        mine = [m for m in listed if m["unique_args"].get(REFERENCE_ARG) in refs]
        row.messages_at_provider = row.live_messages = len(mine)
        copies.append(mine)
    return copies
