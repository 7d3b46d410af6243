"""Keys that follow an erasure at once (issue 29): a person who returns after erasure is sent to, and
an intent sealed before their erasure is refused by name, inside the minute a process caches keys.

The review erased a recipient, then sent to them again within 60 s: the client sealed with the
destroyed key still in its cache, or another client sealed with a fresh key that the worker opened
with its cached old one (`InvalidTag` in `submit_attempt`, the submit recorded `unknown`). Real
stack: the session's Temporal, worker, emulator and PostgreSQL, the same client and worker
processes throughout, messages counted at the emulator.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.intent import Intent
from herald.core.lifecycle import IntentState
from herald.intake.requests import build_intent, parse_request
from herald.ledger.privacy import erase_recipient
from herald.privacy.recipient_vault import RecipientVault
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator

WAIT = 60


def _order(ref: str) -> dict[str, str]:
    return {"order_ref": ref, "amount": "9.99", "currency": "EUR", "merchant": "Herald Shop"}


async def test_a_returning_person_is_sent_to_and_an_intent_sealed_before_their_erasure_is_refused(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    """Within the cache window after an erasure, new intents from the session's client and from a second
    client are delivered once each under a key the ledger holds; one sealed before the erasure ends
    permanent_failure naming it, with nothing sent; no InvalidTag, no unknown."""
    caplog.set_level(logging.WARNING)
    to = fresh_recipient()
    before, stale, after, other = (fresh_key() for _ in range(4))
    await herald.send(receipt_request(before, to, render_data=_order("ord-before")))
    assert (await asyncio.wait_for(herald.wait(before), WAIT)).state is IntentState.DELIVERED
    # The client and the worker now hold this person's key in their caches.
    sealed_before = await RecipientVault(pool, SESSION_KEKS).seal_intent(
        build_intent(
            parse_request(receipt_request(stale, to, render_data=_order("ord-stale"))),
            datetime.now(UTC),
            SESSION_KEYRING,
        )
    )

    erasure = await erase_recipient(
        pool, recipient=to, operator="dpo", reason="returning person", keyring=SESSION_KEYRING
    )
    assert erasure.keys_destroyed == 1

    # The person comes back at once: the same client, then another client process (nothing cached).
    await herald.send(receipt_request(after, to, render_data=_order("ord-after")))
    second_client = herald.with_vault(RecipientVault(pool, SESSION_KEKS))
    await second_client.send(receipt_request(other, to, render_data=_order("ord-other")))
    await herald._start(sealed_before, TEST_POLICY)  # sealed a moment before the erasure, started after

    finals = {key: await asyncio.wait_for(herald.wait(key), WAIT) for key in (after, other, stale)}
    assert finals[after].state is IntentState.DELIVERED
    assert finals[other].state is IntentState.DELIVERED
    assert finals[stale].state is IntentState.PERMANENT_FAILURE
    assert "erased" in (finals[stale].attempts[-1].submit_reason or "")
    bodies = [message["body"] for message in await emulator.messages(to)]
    assert [sum(ref in body for body in bodies) for ref in ("ord-before", "ord-after", "ord-other", "ord-stale")] == [
        1, 1, 1, 0,
    ]  # fmt: skip
    assert "InvalidTag" not in caplog.text and "SealedValueCorrupt" not in caplog.text


async def test_the_returning_persons_new_intent_is_sealed_under_the_key_the_ledger_holds(
    herald: HeraldClient, pool: AsyncConnectionPool
) -> None:
    """A client that sealed for a person before their erasure seals the next intent, within the cache
    window, under the new key the ledger holds: a process with nothing cached opens it."""
    to = fresh_recipient()

    def intent(ref: str) -> Intent:
        return build_intent(
            parse_request(receipt_request(fresh_key(), to, render_data=_order(ref))), datetime.now(UTC), SESSION_KEYRING
        )

    vault = RecipientVault(pool, SESSION_KEKS)  # one client process: its cache holds the key it sealed with
    first = await vault.seal_intent(intent("ord-1"))
    await erase_recipient(pool, recipient=to, operator="dpo", reason="returning person", keyring=SESSION_KEYRING)
    second = await vault.seal_intent(intent("ord-2"))

    assert second.message.recipient != first.message.recipient
    assert await RecipientVault(pool, SESSION_KEKS).open(second.message.recipient, "recipient") == to
