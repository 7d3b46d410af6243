"""Which intents the ledger knows were addressed to one person: the workflows an erasure must reach.

Found as the ledger's ``erase_recipient`` finds them (migration 016): by keyed fingerprint under
every key held, and, for intents recorded before keyed fingerprints, by the canonical recipient.
Intents already erased are found too (their fingerprint stays): an intent still running when an
earlier erasure ran is reached by running the erasure again.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from herald.fingerprints import Keyring, canonical_recipient


async def intents_addressed_to(pool: AsyncConnectionPool, recipient: str, keyring: Keyring) -> list[str]:
    """The workflow ids (``<key>/<channel>``) of every intent addressed to `recipient`, in any
    spelling of the same address (under every key `keyring` holds), erased or not."""
    candidates = keyring.recipient_candidates(recipient)
    canonical = canonical_recipient(recipient)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT workflow_id FROM intents
                WHERE recipient_fingerprint = ANY(%s)
                   OR (recipient_fingerprint IS NULL AND lower(recipient) = %s)
                ORDER BY workflow_id""",
            (candidates, canonical.lower()),
        )
        return [row[0] for row in await cursor.fetchall()]
