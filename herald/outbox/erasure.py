"""Erasing one person's notices from a service's outbox (``starter.py erase``).

A notice committed to ``herald_outbox`` carries its recipients in plain text for as long as the
row lives, relayed or not. Erasure replaces the notice of every row addressed to the person with a
fixed marker, and a row not yet relayed is refused so that no relay ever starts it
(``herald_outbox_erase`` in ``schema.sql``, which also says why it is a function and not a grant).

Who "the person" is: every spelling whose canonical form (``herald.privacy.fingerprints.canonical_recipient``:
a number as every door reads it, ``herald.core.recipients.sms_number``; an e-mail address with its local
part lower-cased and its domain in lower-case ASCII) is the erased recipient's. Notices keep an
address as the service wrote it, and a number as written by a row inserted without ``enqueue`` (or
before notices were canonicalised), so the spellings are found here, in Python, where the canonical
form is defined, and handed to the database function, which compares each whole against a
channel's ``recipient``.
"""

from __future__ import annotations

import re

from psycopg_pool import AsyncConnectionPool

from herald.core.intent import workflow_id_for
from herald.core.message import Channel
from herald.core.outcomes import Frozen
from herald.intake.requests import BUSINESS_KEY_PATTERN
from herald.privacy.fingerprints import canonical_recipient

_CHANNELS = frozenset(channel.value for channel in Channel)
# What an erased row's notice becomes (the function writes it; kept here for readers and tests).
ERASED_NOTICE = {"erased": True}

# Every distinct spelling of one kind a notice addresses: a channel entry's "recipient", when it is
# a string with an '@' (an address), or without one and not already canonical (a number: '+' and
# ASCII digits; PostgreSQL's '$' is the end of the text, unlike Python's). A notice enqueued
# through ``enqueue`` holds a number in its canonical form, which is compared as it is.
_SPELLINGS = """
    SELECT DISTINCT entry ->> 'recipient'
      FROM herald_outbox o
     CROSS JOIN LATERAL jsonb_array_elements(
               CASE WHEN jsonb_typeof(o.notice -> 'channels') = 'array' THEN o.notice -> 'channels' END) AS entry
     WHERE jsonb_typeof(entry -> 'recipient') = 'string'
       AND CASE WHEN %(address)s THEN strpos(entry ->> 'recipient', '@') > 0
                ELSE strpos(entry ->> 'recipient', '@') = 0 AND entry ->> 'recipient' !~ '^[+][0-9]+$' END
"""


class OutboxErasure(Frozen):
    """What one erasure did to the outbox."""

    rows_erased: int
    # Of those, rows that were still pending: now refused, never to be relayed.
    never_relayed: int
    # The intents those notices named for the recipient (``<key>/<channel>``): started or not, they
    # are the workflows whose histories hold the recipient too.
    workflow_ids: tuple[str, ...]
    # How long a relay may still be starting one of those rows from a copy it read before the
    # erasure (its claim's lease; 0 when no row was claimed). Its intent exists only after that.
    claim_seconds_left: float


async def erase_outbox_notices(pool: AsyncConnectionPool, recipient: str) -> OutboxErasure:
    """Replace the notice of every outbox row addressed to `recipient` (any spelling of the same
    address) with the marker; refuse those not yet relayed. Idempotent: an erased row names no one."""
    spellings = await _spellings(pool, canonical_recipient(recipient))
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT * FROM herald_outbox_erase(%s)", (spellings,))
        rows = await cursor.fetchall()
    workflow_ids: set[str] = set()
    for business_key, channels, _, _ in rows:
        # A refused row may hold anything there; only a valid key and channel ever started an intent.
        if re.fullmatch(BUSINESS_KEY_PATTERN, business_key):
            workflow_ids.update(workflow_id_for(business_key, c) for c in channels if c in _CHANNELS)
    return OutboxErasure(
        rows_erased=len(rows),
        never_relayed=sum(1 for row in rows if row[2]),
        workflow_ids=tuple(sorted(workflow_ids)),
        claim_seconds_left=max((float(row[3]) for row in rows), default=0.0),
    )


async def _spellings(pool: AsyncConnectionPool, canonical: str) -> list[str]:
    """Every spelling of `canonical` that a notice in the outbox addresses (the canonical form too)."""
    found = {canonical}
    # A server-side cursor: the outbox keeps relayed rows, so the spellings are streamed.
    async with pool.connection() as conn, conn.transaction(), conn.cursor(name="herald_outbox_spellings") as cursor:
        await cursor.execute(_SPELLINGS, {"address": "@" in canonical})
        async for (spelling,) in cursor:
            if spelling not in found and names(spelling, canonical):
                found.add(spelling)
    return sorted(found)


def names(spelling: str, canonical: str) -> bool:
    """Whether a notice's `spelling` of an address is the person whose canonical form is `canonical`.

    An unquoted ASCII address canonicalises by lower-casing alone (its domain is already its ASCII
    form), so it is compared without the validator, which costs ~80 us an address. Measured on an
    outbox of 100,000 relayed two-channel notices (it keeps every row): erasing one address took
    8.3-9.5 s with the validator on every spelling, 1.0-1.1 s with this; a number, 0.35 s. Measured
    again when numbers' non-canonical spellings came to be searched too (the same scan, few
    spellings to compare): a number 0.49-0.76 s, 0.23-0.31 s without the search; an address 1.2-1.5 s.
    tests/unit/test_outbox_erasure.py holds this shortcut to canonical_recipient.
    """
    if "@" not in spelling:
        # A number as every door reads it; and, wider than the doors, with surrounding whitespace
        # taken off: a row the relay refused for a final newline still holds the person's number.
        try:
            return spelling == canonical or canonical_recipient(spelling.strip()) == canonical
        except ValueError:
            return False
    if spelling.isascii() and '"' not in spelling and "\\" not in spelling:
        return spelling.lower() == canonical
    try:
        return canonical_recipient(spelling) == canonical
    except ValueError:  # no address at all: a row the relay refused may hold anything there
        return False
