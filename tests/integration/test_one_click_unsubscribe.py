"""One-click unsubscribe on the real stack: the SMTP adapter over TCP to the ESP emulator (an aiosmtpd relay
that plays SendGrid), the receipt server over HTTP, Temporal and PostgreSQL.

Marketing e-mail carries List-Unsubscribe and List-Unsubscribe-Post, judged on the message the relay
received; a POST to its link suppresses the next marketing e-mail to that address (nothing reaches the
relay) while receipts still go; a GET alone changes nothing; SendGrid's own group_unsubscribe event does
what the POST does. Messages are counted at the relay (its admin API), never in Herald's code.

A marketing e-mail needs a marketing e-mail template; rather than lean on the shipped one (class_promo_email), the test
publishes one into a copy of the registry (as ``starter.py template publish`` would) and points the
template loader at it for its own duration. The workers here sign links (the session's do not hold an
unsubscribe key), and the links point at a receipt server here that verifies them; SendGrid's events
go to the session's receipt server, as in production. The links are https:// (RFC 8058; Herald writes no
other kind) on that server's loopback host and port; it speaks plain HTTP with no TLS proxy in front, so
the test, as the mail client, calls the same host, port and path over http (devstack.demo_email.over_loopback).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.demo_email import over_loopback
from devstack.processes import free_port
from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.intake import template_registry as templates
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.smtp import SmtpAdapter
from herald.receipts.app import ReceiptEndpoint, build_receipt_server
from herald.settings import UnsubscribeSettings
from tests import reads
from tests.intents import email_request, fresh_address, fresh_key
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY, Esp, consented_to_marketing
from worker import build_submit_worker, build_worker

WAIT = 90
KEY = secrets.token_bytes(32)
NEWS = "class_news_email"
NEWS_TEMPLATE = """# New classes, to members who agreed to hear about them. A test's marketing e-mail.
# channel: email
# category: marketing
# subject: New classes at ${studio}
# field studio: text max=60
New classes at ${studio} this week: spin, yoga and more.
"""


@pytest.fixture(scope="module")
def marketing_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The shipped registry plus a published marketing e-mail template, read by the template loader."""
    registry = tmp_path_factory.mktemp("registry") / "templates"
    shutil.copytree(Path(templates.__file__).parents[1] / "templates", registry)
    templates.publish(NEWS, 1, NEWS_TEMPLATE, root=registry)
    shipped = templates._root
    templates._root = lambda: registry  # type: ignore[assignment]
    templates.published.cache_clear()
    templates.load_template.cache_clear()
    try:
        yield
    finally:
        templates._root = shipped  # type: ignore[assignment]
        templates.published.cache_clear()
        templates.load_template.cache_clear()


@pytest.fixture(scope="module")
async def signing(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, receipt_server: str, marketing_template: None
) -> AsyncIterator[tuple[HeraldClient, str]]:
    """Workers whose SMTP adapter signs unsubscribe links (their own task queue), and a receipt server
    that verifies them; yields the client and the links' base (HERALD_UNSUBSCRIBE_URL: https:// on that
    server's host and port)."""
    port = free_port()
    keys = UnsubscribeSettings(keys={"it": KEY}, url=f"https://127.0.0.1:{port}")
    receipts = settings.receipts.model_copy(
        update={"unsubscribe": keys, "port": port, "public_url": f"http://127.0.0.1:{port}"}
    )
    endpoint = ReceiptEndpoint(
        receipts,
        auth_token=settings.twilio.auth_token.get_secret_value(),
        pool=pool,
        client=temporal,
        keyring=SESSION_KEYRING,
    )
    server = build_receipt_server(endpoint, "127.0.0.1", port)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    task_queue = f"herald-unsubscribe-{secrets.token_hex(4)}"
    local = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": task_queue})})
    adapter = SmtpAdapter(settings.email.model_copy(update={"unsubscribe": keys}), keyring=SESSION_KEYRING)
    provider = ProviderActivities(
        {Channel.EMAIL: adapter},
        receipts.public_url,
        pool,
        vault=RecipientVault(pool, SESSION_KEKS),
        keyring=SESSION_KEYRING,
    )
    try:
        async with (
            build_worker(temporal, local, LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS)), provider),
            build_submit_worker(temporal, local, provider),
        ):
            yield (
                HeraldClient(
                    temporal,
                    task_queue,
                    policy=TEST_POLICY,
                    vault=RecipientVault(pool, SESSION_KEKS),
                    keyring=SESSION_KEYRING,
                ),
                keys.url or "",
            )
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)
        await adapter.aclose()


async def _subscriber(pool: AsyncConnectionPool) -> str:
    """A fresh address that agreed to marketing (the policy asks consent for it)."""
    return await consented_to_marketing(pool, fresh_address(), datetime.now(UTC) - timedelta(seconds=1))


async def _send(herald: HeraldClient, to: str, *, marketing: bool) -> IntentStatus:
    key = fresh_key("class_news" if marketing else "order_receipt")
    request = (
        email_request(key, to, template_id=NEWS, render_data={"studio": "Herald Fitness"})
        if marketing
        else email_request(key, to)
    )
    await herald.send(request)
    return await asyncio.wait_for(herald.wait(key, Channel.EMAIL), WAIT)


def _header(message: dict[str, Any], name: str) -> str | None:
    return next((value for key, value in message["headers"] if key.lower() == name.lower()), None)


async def _marketing_at_relay(esp: Esp, to: str) -> list[dict[str, Any]]:
    return [m for m in await esp.messages(to) if m["subject"] == "New classes at Herald Fitness"]


async def test_marketing_carries_the_header_pair_and_a_receipt_carries_neither(
    signing: tuple[HeraldClient, str], esp: Esp, pool: AsyncConnectionPool
) -> None:
    """On the messages the relay received: the marketing e-mail's List-Unsubscribe is the https:// link
    HERALD_UNSUBSCRIBE_URL/unsubscribe/<token> with List-Unsubscribe-Post One-Click; the order receipt to the
    same address has neither header."""
    herald, url = signing
    to = await _subscriber(pool)
    assert (await _send(herald, to, marketing=True)).state is IntentState.DELIVERED
    assert (await _send(herald, to, marketing=False)).state is IntentState.DELIVERED
    [news] = await _marketing_at_relay(esp, to)
    [receipt] = [m for m in await esp.messages(to) if m["subject"] != news["subject"]]
    link = _header(news, "List-Unsubscribe")
    assert url.startswith("https://") and link is not None
    assert link.startswith(f"<{url}/unsubscribe/") and link.endswith(">")
    assert _header(news, "List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"
    assert to not in link and to.split("@")[0] not in link
    assert _header(receipt, "List-Unsubscribe") is None and _header(receipt, "List-Unsubscribe-Post") is None


async def test_a_one_click_post_stops_marketing_and_receipts_still_go(
    signing: tuple[HeraldClient, str], esp: Esp, pool: AsyncConnectionPool
) -> None:
    """The link from the received message: GET shows the button and changes nothing, and a POST with an empty
    body or List-Unsubscribe=Nope is refused 400 with nothing stored (the next marketing e-mail reaches the
    relay); a forged variant naming another address is refused 403 with nothing stored; the mail client's
    POST is answered 200 and from then on marketing to that address is suppressed naming the unsubscribe,
    with nothing at the relay, while the order receipt is delivered."""
    herald, _ = signing
    to, other = await _subscriber(pool), await _subscriber(pool)
    assert (await _send(herald, to, marketing=True)).state is IntentState.DELIVERED
    [news] = await _marketing_at_relay(esp, to)
    link = over_loopback((_header(news, "List-Unsubscribe") or "").strip("<>"))
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        page = await http.get(link)
        assert page.status_code == 200 and '<form method="post">' in page.text
        empty = await http.post(link, content=b"")
        nope = await http.post(link, data={"List-Unsubscribe": "Nope"})
        assert empty.status_code == nope.status_code == 400 and "List-Unsubscribe=One-Click" in nope.text
        assert await reads.recipient_requests(pool, to) == []
        # Neither a GET nor a POST without the pair is a request: the next promotion reaches the relay.
        assert (await _send(herald, to, marketing=True)).state is IntentState.DELIVERED

        base, token = link.rsplit("/", 1)
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        mine, theirs = (bytes.fromhex(SESSION_KEYRING.recipient(a).split(":")[1]) for a in (to, other))
        forged = base64.urlsafe_b64encode(raw.replace(mine, theirs)).rstrip(b"=").decode()
        refused = await http.post(f"{base}/{forged}", data={"List-Unsubscribe": "One-Click"})
        assert refused.status_code == 403 and await reads.recipient_requests(pool, other) == []

        answer = await http.post(link, data={"List-Unsubscribe": "One-Click"})
        assert answer.status_code == 200 and "You are unsubscribed" in answer.text
    [request] = await reads.recipient_requests(pool, to)
    assert (request["source"], request["category"], request["channel"]) == ("one_click", "marketing", "email")

    stopped = await _send(herald, to, marketing=True)
    assert stopped.state is IntentState.SUPPRESSED, stopped.transitions
    assert "unsubscribe" in stopped.transitions[-1].reason
    assert len(await _marketing_at_relay(esp, to)) == 2
    assert (await _send(herald, to, marketing=False)).state is IntentState.DELIVERED
    assert len(await esp.messages(to)) == 3


async def test_a_sendgrid_group_unsubscribe_event_stops_marketing(
    signing: tuple[HeraldClient, str], esp: Esp, pool: AsyncConnectionPool
) -> None:
    """The ESP posts processed, delivered, then group_unsubscribe (the person left through a suppression
    group's link): the session's receipt server records it under the intent's fingerprint and category, and
    the next marketing e-mail is suppressed with nothing at the relay; the order receipt still goes."""
    herald, _ = signing
    to = await _subscriber(pool)
    await esp.arm(to, "unsubscribe", event="group_unsubscribe", asm_group_id=7, count=1)
    assert (await _send(herald, to, marketing=True)).state is IntentState.DELIVERED
    for _ in range(100):  # the event follows `delivered` by a step of the emulator's clock
        recorded = await reads.recipient_requests(pool, to)
        if recorded:
            break
        await asyncio.sleep(0.1)
    [request] = recorded
    assert (request["source"], request["category"], request["detail"]) == (
        "esp_event", "marketing", "SendGrid group_unsubscribe (group 7)",
    )  # fmt: skip
    stopped = await _send(herald, to, marketing=True)
    assert stopped.state is IntentState.SUPPRESSED, stopped.transitions
    assert len(await _marketing_at_relay(esp, to)) == 1
    assert (await _send(herald, to, marketing=False)).state is IntentState.DELIVERED
