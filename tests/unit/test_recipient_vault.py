"""The recipient vault's rules, on key rows held in memory (herald/privacy/recipient_vault.py, herald/privacy/key_encryption.py).

Key generations: a token names the generation that sealed it; a person erased and back gets a new
one, and no process seals or opens under a generation the rows no longer hold, whatever it cached.
A tag failure re-reads the row before deciding. Data keys are stored wrapped under a KEK; rotation
keeps old rows opening; `sealed:1:` tokens written before key ids still open.
"""

from __future__ import annotations

import asyncio
import base64
import os
from datetime import UTC, datetime
from typing import cast

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from herald.core.intent import Intent
from herald.intake.requests import build_intent, parse_request
from herald.privacy.key_encryption import KeyUnavailable, LocalKeks
from herald.privacy.recipient_vault import (
    LEGACY_PREFIX,
    PREFIX,
    UNOPENABLE,
    KeyRow,
    RecipientErased,
    RecipientVault,
    SealedValueCorrupt,
    wrap_context,
)
from tests.depth import examples
from tests.intents import fresh_key, receipt_request
from tests.keys import SESSION_KEYRING

TO = "+15552900001"
FINGERPRINT = "fp:0123456789abcdef"


class MemoryRows:
    """recipient_keys in a dict, counting reads; `erase` deletes a row as erase_recipient() does."""

    def __init__(self) -> None:
        self.rows: dict[str, KeyRow] = {}
        self.reads = 0

    async def read(self, fingerprint: str, *, timeout: float | None = None) -> KeyRow | None:
        self.reads += 1
        return self.rows.get(fingerprint)

    async def create(self, fingerprint: str, row: KeyRow) -> KeyRow | None:
        return self.rows.setdefault(fingerprint, row)

    def erase(self, fingerprint: str) -> None:
        self.rows.pop(fingerprint, None)


def _keks(*ids: str, active: str | None = None) -> LocalKeks:
    return LocalKeks({kek_id: _KEK_BYTES[kek_id] for kek_id in ids}, active or ids[0])


_KEK_BYTES = {name: os.urandom(32) for name in ("kek-a", "kek-b")}


def _vault(rows: MemoryRows, keks: LocalKeks | None = None) -> RecipientVault:
    return RecipientVault(cast(AsyncConnectionPool, None), keks or _keks("kek-a"), rows=rows)


def _intent(body_ref: str = "ord-1") -> Intent:
    request = receipt_request(fresh_key(), TO, render_data={"order_ref": body_ref, "amount": "1.00",
                                                             "currency": "EUR", "merchant": "Shop"})  # fmt: skip
    return build_intent(parse_request(request), datetime.now(UTC), SESSION_KEYRING).model_copy(
        update={"recipient_fingerprint": FINGERPRINT}
    )


async def test_a_token_names_its_key_generation_and_the_row_holds_it_wrapped_never_in_the_clear() -> None:
    """Sealing makes one row per person, wrapped under the active KEK and bound to the fingerprint and key id."""
    rows = MemoryRows()
    sealed = await _vault(rows).seal_intent(_intent())
    row = rows.rows[FINGERPRINT]
    assert sealed.message.recipient.startswith(f"{PREFIX}{FINGERPRINT}:{row.key_id}:")
    assert row.data_key is None and row.kek_id == "kek-a" and row.wrapped_key is not None
    key = await _keks("kek-a").unwrap("kek-a", row.wrapped_key, wrap_context(FINGERPRINT, row.key_id))
    assert key not in row.wrapped_key
    with pytest.raises(KeyUnavailable):  # moved to another person's row, it does not unwrap
        await _keks("kek-a").unwrap("kek-a", row.wrapped_key, wrap_context("fp:another", row.key_id))


async def test_a_person_erased_and_back_gets_a_new_generation_whatever_a_process_cached() -> None:
    """After an erasure, the same client seals under a new key id; a worker that cached the old key opens
    the new token, and refuses the old one as erased (not as a tag failure)."""
    rows = MemoryRows()
    client, worker = _vault(rows), _vault(rows)
    old = await client.seal_intent(_intent("ord-old"))
    assert await worker.open(old.message.recipient, "recipient") == TO  # both caches now hold generation 1

    rows.erase(FINGERPRINT)
    new = await client.seal_intent(_intent("ord-new"))

    assert new.message.recipient.split(":")[4] != old.message.recipient.split(":")[4]  # another key id
    assert await worker.open(new.message.recipient, "recipient") == TO
    with pytest.raises(RecipientErased):
        await worker.open(old.message.recipient, "recipient")
    assert "ord-new" in await _vault(rows).open(new.message.body, "body")  # a process with nothing cached


async def test_every_open_asks_the_rows_whether_its_generation_is_current() -> None:
    """A worker that opened a person's token refuses the next one as erased once their row is gone,
    though its cache still holds the key: the row is read at every opening, once per activity."""
    rows = MemoryRows()
    vault = _vault(rows)
    sealed = await vault.seal_intent(_intent())
    opening = vault.opening()
    reads = rows.reads
    await opening.open(sealed.message.recipient, "recipient")
    await opening.open(sealed.message.body, "body")
    assert rows.reads == reads + 1  # one read for the activity's every field

    rows.erase(FINGERPRINT)
    with pytest.raises(RecipientErased):
        await vault.open(sealed.message.recipient, "recipient")


async def test_a_tag_failure_reads_the_key_again_before_deciding() -> None:
    """A wrong key remembered for a generation (a cache gone bad) costs one more read, and the token opens."""
    rows = MemoryRows()
    vault = _vault(rows)
    sealed = await vault.seal_intent(_intent())
    key_id = rows.rows[FINGERPRINT].key_id
    vault._remember(FINGERPRINT, key_id, os.urandom(32))  # what a bad cache would hold
    reads = rows.reads
    assert await vault.open(sealed.message.recipient, "recipient") == TO
    assert rows.reads == reads + 2


async def test_a_token_that_does_not_open_under_its_own_generation_is_corrupt_after_one_more_read() -> None:
    """An altered ciphertext, or a token opened as another field, is SealedValueCorrupt (an InvalidTag),
    decided after the row was read again; never RecipientErased."""
    rows = MemoryRows()
    vault = _vault(rows)
    sealed = await vault.seal_intent(_intent())
    reads = rows.reads
    with pytest.raises(SealedValueCorrupt):
        await vault.open(sealed.message.body, "recipient")
    assert rows.reads == reads + 2
    with pytest.raises(InvalidTag):  # callers that caught the bare tag failure still do
        await vault.open(sealed.message.body, "subject")


async def test_a_token_sealed_before_key_ids_opens_under_its_generation_and_not_under_a_later_one() -> None:
    """`sealed:1:` tokens (no key id) open under a row migration 020 named `v1.`...; after the person was
    erased and came back, they are refused as erased."""
    rows = MemoryRows()
    clear = os.urandom(32)
    rows.rows[FINGERPRINT] = KeyRow(key_id="v1.0123456789ab", data_key=clear)
    nonce = os.urandom(12)
    sealed = AESGCM(clear).encrypt(nonce, TO.encode(), f"{FINGERPRINT}|recipient".encode())
    token = f"{LEGACY_PREFIX}{FINGERPRINT}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"
    vault = _vault(rows)
    assert await vault.open(token, "recipient") == TO
    again = await vault.seal_intent(_intent())  # a new intent seals sealed:2 under the same generation
    assert again.message.recipient.startswith(f"{PREFIX}{FINGERPRINT}:v1.0123456789ab:")
    assert await vault.open(again.message.recipient, "recipient") == TO

    rows.erase(FINGERPRINT)
    await vault.seal_intent(_intent())  # back, under a new generation
    with pytest.raises(RecipientErased):
        await vault.open(token, "recipient")


async def test_a_kek_rotation_keeps_old_rows_opening_and_wraps_new_ones_under_the_new_kek() -> None:
    """With kek-b active and kek-a kept, a row wrapped under kek-a opens and a new person's row is under
    kek-b; a process holding only kek-b cannot unwrap kek-a's rows, and says which KEK it lacks."""
    rows = MemoryRows()
    before = await _vault(rows, _keks("kek-a")).seal_intent(_intent())
    rotated = _vault(rows, _keks("kek-a", "kek-b", active="kek-b"))
    assert await rotated.open(before.message.recipient, "recipient") == TO
    other = _intent().model_copy(update={"recipient_fingerprint": "fp:another"})
    await rotated.seal_intent(other)
    assert rows.rows["fp:another"].kek_id == "kek-b"
    with pytest.raises(KeyUnavailable, match="'kek-a'.*HERALD_KEY_ENCRYPTION_KEY_FILES"):
        await _vault(rows, _keks("kek-b")).open(before.message.recipient, "recipient")


async def test_the_rows_alone_open_nothing() -> None:
    """Everything recipient_keys holds, read by someone without the KEK (another KEK under the same id),
    opens no token."""
    rows = MemoryRows()
    sealed = await _vault(rows).seal_intent(_intent())
    stranger = LocalKeks({"kek-a": os.urandom(32)}, "kek-a")
    with pytest.raises(KeyUnavailable):
        await _vault(rows, stranger).open(sealed.message.recipient, "recipient")


@settings(max_examples=examples(200), deadline=None)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_an_altered_token_opens_to_its_own_value_or_is_refused_by_name(position: int, replacement: str) -> None:
    """Any one character of a token after its prefix changed: the token opens to what was sealed (a base64
    bit nobody reads), or is refused as erased or corrupt; never another value, never another exception."""

    async def check() -> None:
        vault = _vault(MemoryRows())
        token = (await vault.seal_intent(_intent())).message.recipient
        at = len(PREFIX) + position % (len(token) - len(PREFIX))
        altered = token[:at] + replacement + token[at + 1 :]
        try:
            assert await vault.open(altered, "recipient") == TO
        except UNOPENABLE:
            pass

    asyncio.run(check())


async def test_a_worker_without_a_key_encryption_key_stops_at_start_naming_the_variable() -> None:
    """worker.py's run_worker, given a ledger and fingerprint keys but no KEK, refuses before connecting
    to anything, in one InvalidSetting naming HERALD_KEY_ENCRYPTION_KEY_FILES."""
    from herald.runtime.process import ProcessRuntime
    from herald.settings import InvalidSetting, load_settings
    from tests.keys import SESSION_FINGERPRINT_KEYS
    from worker import run_worker

    settings = load_settings({
        "DATABASE_URL": "postgresql://herald@127.0.0.1:1/herald",
        "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
    })  # fmt: skip
    with pytest.raises(InvalidSetting, match="^HERALD_KEY_ENCRYPTION_KEY_FILES: required"):
        await run_worker(ProcessRuntime(settings), asyncio.Event(), providers=lambda *_: {})
