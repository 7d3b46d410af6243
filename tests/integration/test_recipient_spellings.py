"""One number, one person, whatever its spelling: the review's reproduction on the real stack.

The review sent a marketing text to ``"+15552600018\\n"``: it passed the client (``re.match`` with a
pattern ending in ``$``), its keyed fingerprint was not the number's, so the STOP the number had
texted did not suppress it (one message at the provider), and ``starter.py erase +15552600018``
erased 0 intents (the plaintext, the Temporal run and the data key stayed). Here the same, through
the real client, worker, policy gate, inbound route (the emulator plays the handset texting STOP),
ledger and Temporal; messages are counted at the emulator under every spelling.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.cli.erase import cmd_erase
from herald.cli.parser import parse_args
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.recipients import NUMBER_RULE, short
from herald.core.send_policy import Category
from herald.intake.errors import InvalidIntent
from herald.ledger.policy_store import grant_consent
from herald.outbox.erasure import ERASED_NOTICE, erase_outbox_notices
from herald.runtime.process import ProcessRuntime
from tests.integration.test_erasure_reach import (  # noqa: F401 - the service database's fixtures, shared
    _enqueue,
    _rows,
    outbox_db,
    owner_outbox,
    relay_outbox,
    sms_notice,
)
from tests.integration.test_inbound_sms import PROMOTION, text_us
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import Emulator

WAIT = 60
_FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
_ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


async def _consenting_and_stopped(
    pool: AsyncConnectionPool, emulator: Emulator, receipts: str, to: str, spelling: str
) -> None:
    """The person consented to marketing (as the service's records spell them, and as the number),
    then texted STOP from their handset to our number."""
    for recipient in (to, spelling):
        # A spelling no door reads has no fingerprint at all (herald.core.recipients): nothing to record.
        with contextlib.suppress(ValueError):
            await grant_consent(
                pool, fingerprint=SESSION_KEYRING.recipient(recipient), category=Category.MARKETING,
                source="signup form", granted_at=datetime.now(UTC),
            )  # fmt: skip
    stop = await text_us(emulator, receipts, to, "STOP")
    assert stop["webhook"]["http_status"] == 200


async def _messages(emulator: Emulator, *spellings: str) -> list[dict[str, Any]]:
    """Every message the emulator accepted for any of these spellings of the number."""
    return [message for spelling in spellings for message in await emulator.messages(spelling)]


async def _erase(settings: Any, number: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`starter.py erase NUMBER` in process, against the session's Temporal and ledger (no outbox)."""
    command = settings.model_copy(update={"outbox": settings.outbox.model_copy(update={"database_url": None})})
    runtime = ProcessRuntime(command, own_temporal_runtime=True)
    try:
        code = await cmd_erase(
            parse_args(["erase", number, "--operator", "dpo", "--reason", "erasure request 29"]), runtime
        )
    finally:
        runtime.close()
    out = capsys.readouterr().out
    assert code == 0, out
    return out.splitlines()


async def _intents_holding(owner_pool: AsyncConnectionPool, number: str) -> list[tuple[str, str]]:
    """Every intent whose recipient column still holds the number's digits, in any spelling."""
    async with owner_pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT workflow_id, recipient FROM intents WHERE regexp_replace(recipient, '[^0-9]', '', 'g') = %s",
            (number.lstrip("+"),),
        )
        return await cursor.fetchall()


async def test_a_trailing_newline_neither_escapes_a_stop_nor_an_erasure(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool,
    receipt_server: str, settings: Any, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The review's reproduction: a marketing text to "+1555...\\n" after the number texted STOP is
    refused at the door or suppressed (0 messages at the emulator, either spelling), and erasing the
    plain number leaves no intent holding it in any spelling."""
    to = fresh_recipient()
    spelling = to + "\n"
    await _consenting_and_stopped(pool, emulator, receipt_server, to, spelling)
    key = fresh_key("class_promotion")
    try:
        await herald.send(receipt_request(key, spelling, **PROMOTION))
    except InvalidIntent as refused:
        assert refused.problems == [("recipient", NUMBER_RULE)]
    else:
        assert (await asyncio.wait_for(herald.wait(key), WAIT)).state is IntentState.SUPPRESSED
    assert await _messages(emulator, to, spelling) == []

    lines = await _erase(settings, to, capsys)

    assert lines[0] == "outbox: not configured (HERALD_OUTBOX_DATABASE_URL unset)"
    assert await _intents_holding(owner_pool, to) == []


async def test_a_spelling_the_rule_normalises_is_the_number_for_stop_fingerprints_and_erasure(
    herald: HeraldClient, temporal: Client, emulator: Emulator, pool: AsyncConnectionPool,
    owner_pool: AsyncConnectionPool, receipt_server: str, settings: Any, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """"＋1 (555) ５５５-٠١٢٣": the intent carries the number itself and its fingerprint, so the STOP the
    number texted suppresses the marketing text to it (0 messages at the emulator), and erasing the
    plain number erases that intent: ledger row and Temporal runs."""
    to = fresh_recipient()
    spelling = f"＋{to[1]} ({to[2:5]}) {to[5:8].translate(_FULL_WIDTH)}-{to[8:].translate(_ARABIC_INDIC)}"
    await _consenting_and_stopped(pool, emulator, receipt_server, to, spelling)
    marketing, receipt = fresh_key("class_promotion"), fresh_key()
    await herald.send(receipt_request(marketing, spelling, **PROMOTION))
    await herald.send(receipt_request(receipt, spelling))
    for key in (marketing, receipt):
        status = await asyncio.wait_for(herald.wait(key), WAIT)
        assert status.state is IntentState.SUPPRESSED, status.transitions[-1].reason
        assert status.destination_fingerprint == short(SESSION_KEYRING.recipient(to))
    assert await _messages(emulator, to, spelling) == []
    ids = sorted([f"{marketing}/sms", f"{receipt}/sms"])
    assert sorted(await _intents_holding(owner_pool, to)) == [(workflow_id, to) for workflow_id in ids]

    lines = await _erase(settings, to, capsys)

    assert lines[1].startswith("temporal: ") and " of 2 intent(s) deleted, verified gone" in lines[1], lines[1]
    assert lines[2].startswith("ledger: erased 2 intent(s) of recipient fingerprint "), lines[2]
    assert await _intents_holding(owner_pool, to) == []
    for workflow_id in ids:
        assert [run async for run in temporal.list_workflows(f'WorkflowId = "{workflow_id}"')] == []


async def test_erasing_the_number_reaches_outbox_rows_in_every_spelling_that_holds_it(
    owner_outbox: AsyncConnectionPool, relay_outbox: AsyncConnectionPool
) -> None:
    """As the relay's login: a notice enqueued to "+1 (555) ..." (stored as the number), and rows a
    service wrote without enqueue to a full-width spelling and to "+1555...\\n" (which the relay
    refuses, but which holds the number), are erased for the plain number; another person's row,
    even one quoting the number in its text, is kept."""
    to, other = fresh_recipient(), fresh_recipient()
    spaced = f"+{to[1]} ({to[2:5]}) {to[5:8]}-{to[8:]}"
    enqueued = await _enqueue(owner_outbox, sms_notice(fresh_key(), spaced))
    assert (await _rows(owner_outbox, [enqueued]))[enqueued]["notice"]["channels"][0]["recipient"] == to
    by_hand = [sms_notice(fresh_key(), f"＋{to[1:].translate(_FULL_WIDTH)}"), sms_notice(fresh_key(), f" {to}\n")]
    async with owner_outbox.connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s), (%s, %s) RETURNING id",
            (by_hand[0]["business_key"], Jsonb(by_hand[0]), by_hand[1]["business_key"], Jsonb(by_hand[1])),
        )
        written = [row[0] for row in await cursor.fetchall()]
    kept = [await _enqueue(owner_outbox, sms_notice(fresh_key(), other, merchant=f"Shop, call {spaced}"))]
    kept_before = await _rows(owner_outbox, kept)

    done = await erase_outbox_notices(relay_outbox, to)

    assert (done.rows_erased, done.never_relayed) == (3, 3)
    erased = await _rows(owner_outbox, [enqueued, *written])
    assert [row["notice"] for row in erased.values()] == [ERASED_NOTICE] * 3
    assert await _rows(owner_outbox, kept) == kept_before
