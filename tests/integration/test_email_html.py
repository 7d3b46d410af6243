"""An e-mail with an HTML part on the real stack: sealed in Temporal's copy like the body and shredded by
erasure, opened by the submit activity and sent as multipart/alternative to the ESP emulator, with the
render data escaped in the HTML part and verbatim in the text part.

Temporal dev server, PostgreSQL, the ESP emulator over SMTP; the intent renders order_receipt_email v2.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.provider import ProviderActivities
from herald.client import HeraldClient
from herald.core.contracts import Called, SubmitInput, attempt_ref
from herald.core.intent import Intent
from herald.core.message import Channel
from herald.core.outcomes import Accepted
from herald.core.rows import AttemptRow, LedgerBatch, RecordIntentInput
from herald.intake.requests import build_intent, parse_request
from herald.ledger.privacy import erase_recipient
from herald.privacy.recipient_vault import PREFIX, RecipientErased, RecipientVault
from tests import reads
from tests.intents import ORDER_DATA, email_request, fresh_address, fresh_key
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import Esp
from worker import build_providers

WAIT = 60
_TOKEN = re.compile(re.escape(PREFIX) + r"[A-Za-z0-9._:-]+:[A-Za-z0-9_=-]+")


def hostile_merchant() -> tuple[str, str]:
    """A merchant name that is markup, with a marker of its own: (the name, the marker)."""
    marker = f"m{secrets.token_hex(6)}"
    return f'"><img src=x onerror=alert({marker})>', marker


def html_request(key: str, to: str, merchant: str) -> dict[str, Any]:
    return email_request(key, to, template_version=2, render_data={**ORDER_DATA, "merchant": merchant})


async def _opened_as(vault: RecipientVault, tokens: set[str], field: str) -> list[str]:
    """What the tokens sealed as `field` open to (a token sealed as another field does not open)."""
    found = []
    for token in tokens:
        try:
            found.append(await vault.open(token, field))
        except InvalidTag:
            continue
    return found


async def test_the_html_part_is_sealed_in_temporals_copy_and_erasure_shreds_it(
    herald: HeraldClient, temporal: Client, settings: Any, pool: AsyncConnectionPool
) -> None:
    """The codec-decoded history holds the HTML part only as a token bound to the field html_body: the
    merchant appears nowhere, escaped or not; the token opens to the escaped part before the erasure
    and never after it."""
    to, key = fresh_address(), fresh_key()
    merchant, marker = hostile_merchant()
    await herald.send(html_request(key, to, merchant))
    assert (await asyncio.wait_for(herald.wait(key, Channel.EMAIL), WAIT)).state.is_terminal
    history = await reads.decoded_payloads(temporal, settings, f"{key}/email")
    assert marker not in history and to not in history
    tokens = set(_TOKEN.findall(history))
    [html] = set(await _opened_as(RecipientVault(pool, SESSION_KEKS), tokens, "html_body"))
    assert f"&quot;&gt;&lt;img src=x onerror=alert({marker})&gt;" in html and "<img" not in html

    erasure = await erase_recipient(
        pool, recipient=to, operator="dpo", reason="html shred test", keyring=SESSION_KEYRING
    )

    assert erasure.keys_destroyed == 1
    after = RecipientVault(pool, SESSION_KEKS)
    for token in tokens:
        with pytest.raises(RecipientErased):
            await after.open(token, "html_body")


def _first_attempt(sealed: Intent, run_id: str) -> SubmitInput:
    """The first attempt's input as the workflow prepares it, with the intent's HTML part beside its body."""
    ref = attempt_ref(sealed.workflow_id, 1)
    now = datetime.now(UTC)
    rows = LedgerBatch(
        record=RecordIntentInput(intent=sealed, run_id=run_id),
        attempts=[AttemptRow(attempt_ref=ref, workflow_id=sealed.workflow_id, number=1, prepared_at=now)],
    )
    return SubmitInput(
        attempt_ref=ref, message=sealed.message, workflow_id=sealed.workflow_id, policy_at=now, validity_seconds=60,
        ledger=rows,
    )  # fmt: skip


async def test_the_submit_activity_opens_the_sealed_html_part_and_the_relay_gets_multipart_alternative(
    settings: Any, pool: AsyncConnectionPool, esp: Esp
) -> None:
    """The submit activity (real ledger, vault and SMTP adapter) opens the sealed text and HTML parts and
    the ESP emulator receives multipart/alternative: the merchant verbatim in text/plain, escaped in
    text/html; the attempt is recorded once."""
    to, key = fresh_address(), fresh_key()
    merchant, marker = hostile_merchant()
    intent = build_intent(parse_request(html_request(key, to, merchant)), datetime.now(UTC), SESSION_KEYRING)
    sealed = await RecipientVault(pool, SESSION_KEKS).seal_intent(intent)
    html_body = sealed.message.html_body
    assert html_body is not None and html_body.startswith(PREFIX) and marker not in html_body
    providers = build_providers(settings, SESSION_KEYRING)
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, start_to_close_timeout=timedelta(seconds=30))
    activities = ProviderActivities(
        providers, settings.receipts.public_url, pool, vault=RecipientVault(pool, SESSION_KEKS), keyring=SESSION_KEYRING
    )
    try:
        step = await environment.run(activities.submit, _first_attempt(sealed, f"run-{secrets.token_hex(4)}"))
    finally:
        for adapter in providers.values():
            await adapter.aclose()
    assert isinstance(step, Called) and isinstance(step.outcome.result, Accepted), step
    [message] = await esp.messages(to)
    assert message["structure"] == "multipart/alternative(text/plain,text/html)"
    assert merchant in message["text_body"]
    assert merchant not in message["html_body"] and "<img" not in message["html_body"]
    assert f"&quot;&gt;&lt;img src=x onerror=alert({marker})&gt;" in message["html_body"]
    assert merchant in unescape(message["html_body"])


async def test_an_intent_with_an_html_part_reaches_the_relay_as_multipart_alternative(
    herald: HeraldClient, esp: Esp
) -> None:
    """End to end through the workflow: the relay receives both parts, the data escaped in the HTML part."""
    to, key = fresh_address(), fresh_key()
    merchant, marker = hostile_merchant()
    await herald.send(html_request(key, to, merchant))
    assert (await asyncio.wait_for(herald.wait(key, Channel.EMAIL), WAIT)).state.is_terminal
    [message] = await esp.messages(to)
    assert merchant in message["text_body"]
    assert message["structure"] == "multipart/alternative(text/plain,text/html)"
    assert f"&quot;&gt;&lt;img src=x onerror=alert({marker})&gt;" in (message["html_body"] or "")
