"""Crypto-shredding (herald/privacy/recipient_vault.py): the codec key opens a history, but not a person.

The review decoded an erased recipient's number from two Temporal payloads with the codec key.
Now the client seals the recipient, body, subject and render data under the recipient's own key
(held in the ledger) before the workflow starts; the codec-decoded history holds tokens only, the
activities open them to send and record; erasure deletes the key, and no token opens again.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.intake.requests import build_intent, parse_request
from herald.ledger.privacy import erase_recipient
from herald.privacy.recipient_vault import PREFIX, RecipientErased, RecipientVault
from tests import reads
from tests.intents import ORDER_DATA, email_request, fresh_address, fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator

_TOKEN = re.compile(re.escape(PREFIX) + r"[A-Za-z0-9._:-]+:[A-Za-z0-9_=-]+")


async def _opened(vault: RecipientVault, tokens: set[str]) -> set[str]:
    """What the tokens open to, each tried as the recipient and as the body (the field is bound)."""
    found = set()
    for token in tokens:
        for field in ("recipient", "body"):
            try:
                found.add(await vault.open(token, field))
            except InvalidTag:
                continue
    return found


async def test_a_history_decoded_with_the_codec_key_holds_tokens_and_erasure_shreds_them(
    herald: HeraldClient, emulator: Emulator, temporal: Client, settings: Any, pool: AsyncConnectionPool
) -> None:
    to, key, order = fresh_recipient(), fresh_key(), f"ord_{secrets.token_hex(4)}"
    data = {"order_ref": order, "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
    await herald.send(receipt_request(key, to, render_data=data))
    assert (await asyncio.wait_for(herald.wait(key), 60)).state is IntentState.DELIVERED
    [sent] = await emulator.messages(to)  # the provider got the plaintext, once
    assert order in sent["body"]

    async with pool.connection() as conn:  # the ledger's copy is plaintext (erasure overwrites it there)
        query = "SELECT recipient, render_data FROM intents WHERE workflow_id = %s"
        cursor = await conn.execute(query, (f"{key}/sms",))
        assert await cursor.fetchone() == (to, data)
    history = await reads.decoded_payloads(temporal, settings, f"{key}/sms")
    assert to not in history and to.lstrip("+") not in history
    assert order not in history  # a render value and the body, sealed with the rest
    tokens = set(_TOKEN.findall(history))
    assert tokens, "no sealed token in the history"
    # Before the erasure, any process with the ledger opens them (a fresh vault: nothing cached).
    assert to in await _opened(RecipientVault(pool, SESSION_KEKS), tokens)

    erasure = await erase_recipient(pool, recipient=to, operator="dpo", reason="shred test", keyring=SESSION_KEYRING)

    assert erasure.keys_destroyed == 1
    after = RecipientVault(pool, SESSION_KEKS)
    for token in tokens:
        with pytest.raises(RecipientErased):
            await after.open(token, "recipient")


async def test_an_email_subject_and_body_are_sealed_too(
    herald: HeraldClient, temporal: Client, settings: Any
) -> None:
    to, key, order = fresh_address(), fresh_key(), f"A-{secrets.token_hex(4)}"
    await herald.send(email_request(key, to, render_data={**ORDER_DATA, "order_ref": order}))
    assert (await asyncio.wait_for(herald.wait(key, "email"), 60)).state.is_terminal
    history = await reads.decoded_payloads(temporal, settings, f"{key}/email")
    assert to not in history
    assert order not in history  # the order reference in the subject, body and render data


async def test_an_intent_whose_recipient_was_erased_before_it_ran_is_refused_and_recorded_erased(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    """Sealed, then the person erased (their key destroyed) before the first submit: nothing is
    sent, the intent ends refused naming why, and the ledger records it as an erased intent."""
    to, key = fresh_recipient(), fresh_key()
    intent = build_intent(parse_request(receipt_request(key, to)), datetime.now(UTC), SESSION_KEYRING)
    sealed = await RecipientVault(pool, SESSION_KEKS).seal_intent(intent)
    assert (
        await erase_recipient(pool, recipient=to, operator="dpo", reason="before it ran", keyring=SESSION_KEYRING)
    ).keys_destroyed == 1

    await herald._start(sealed, TEST_POLICY)  # as a client that sealed a moment before the erasure

    final = await asyncio.wait_for(herald.wait(key), 60)
    assert final.state is IntentState.PERMANENT_FAILURE
    assert final.attempts and "erased" in (final.attempts[-1].submit_reason or "")
    assert await emulator.messages(to) == []
    async with owner_pool.connection() as conn:
        cursor = await conn.execute("SELECT recipient, body FROM intents WHERE workflow_id = %s", (f"{key}/sms",))
        row = await cursor.fetchone()
    assert row == ("(erased)", "")


async def test_clients_sealing_for_one_new_recipient_at_once_agree_on_one_key(pool: AsyncConnectionPool) -> None:
    """Twenty clients (each its own vault, nothing cached) seal for a recipient never seen: one key
    wins, and every token opens with it."""
    to = fresh_recipient()
    intent = build_intent(parse_request(receipt_request(fresh_key(), to)), datetime.now(UTC), SESSION_KEYRING)
    sealed = await asyncio.gather(*(RecipientVault(pool, SESSION_KEKS).seal_intent(intent) for _ in range(20)))
    reader = RecipientVault(pool, SESSION_KEKS)
    assert {await reader.open(one.message.recipient, "recipient") for one in sealed} == {to}
