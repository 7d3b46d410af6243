"""Erasure and retention: destroying personal data while the audit trail stays (migration 013).

Both run as ledger functions that overwrite only the personal columns, with fixed markers, and
record themselves in ``ledger_purges``; nothing here can touch a state, a time or a reason.
"""

from __future__ import annotations

from datetime import datetime

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from herald.core.outcomes import Frozen
from herald.privacy.fingerprints import Keyring, canonical_recipient


class Purge(Frozen):
    purge_id: int
    rows_affected: int


class Erasure(Purge):
    # Which recipient, as the ledger now knows them: the fingerprint, never the recipient.
    recipient_fingerprint: str
    # Attachments only their intents named, whose content and filename were erased with them.
    artifacts_erased: int = 0
    # Data keys deleted (herald/privacy/recipient_vault.py): their sealed Temporal payloads no longer decode.
    keys_destroyed: int = 0


async def erase_recipient(
    pool: AsyncConnectionPool, *, recipient: str, keyring: Keyring, operator: str, reason: str
) -> Erasure:
    """Erase a recipient's number or address, render data, bodies and subjects, from every intent
    addressed to them in any spelling of the same address (found by keyed fingerprint, under every
    key `keyring` holds, and by canonical form for intents recorded before keyed fingerprints).

    Suppression evidence about them is kept by fingerprint, so an erasure never lifts an opt-out.
    """
    candidates = keyring.recipient_candidates(recipient)
    canonical = canonical_recipient(recipient)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT * FROM erase_recipient(%s, %s, %s, %s)", (candidates, canonical.lower(), operator, reason)
        )
        row = await cursor.fetchone()
    assert row is not None  # the function always returns one row
    return Erasure(
        purge_id=row[0],
        rows_affected=row[1],
        artifacts_erased=row[2],
        keys_destroyed=row[3],
        recipient_fingerprint=candidates[0],
    )


async def purge_inbox_payloads(pool: AsyncConnectionPool, *, older_than: datetime, operator: str, reason: str) -> Purge:
    """Replace the raw payload of every decided report received before ``older_than``."""
    return await _retention_run(pool, "purge_inbox_payloads", older_than, operator, reason)


async def purge_provider_marks(pool: AsyncConnectionPool, *, older_than: datetime, operator: str, reason: str) -> Purge:
    """Delete the provider marks (migration 021) made before ``older_than`` (migration 023)."""
    return await _retention_run(pool, "purge_provider_marks", older_than, operator, reason)


async def _retention_run(
    pool: AsyncConnectionPool, function: str, older_than: datetime, operator: str, reason: str
) -> Purge:
    """One retention function of the ledger's: each refuses a cut-off inside its floor and records its run."""
    async with pool.connection() as conn:
        query = sql.SQL("SELECT * FROM {}(%s, %s, %s)").format(sql.Identifier(function))
        cursor = await conn.execute(query, (older_than, operator, reason))
        row = await cursor.fetchone()
    assert row is not None  # each function always returns one row
    return Purge(purge_id=row[0], rows_affected=row[1])
