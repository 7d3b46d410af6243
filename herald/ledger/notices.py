"""Notices as operators look for them and read them: found by what an operator has in hand, read whole.

An operator holds a business key, a workflow id, a provider's message id, our attempt reference
(from a callback URL), or a person's keyed fingerprint (computed by the caller from what was
typed: the ledger never sees a number). ``find_business_keys`` names the notices those point at;
``notice_story`` reads one notice's channels, each its intent's history (``herald.ledger.history``,
the same reading ``starter.py status --channel`` prints) with what the ledger concluded beside it:
the duplicates it counted and the recipient's requests and suppressions. Read-only, and nothing
judged again here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg_pool import AsyncConnectionPool

from herald.core.outcomes import Frozen
from herald.ledger.history import IntentHistory, intent_history
from herald.ledger.recipient_requests import RecordedRequest, requests_of

# More than this many notices behind one identifier is a list, not a lookup: the caller pages it.
FOUND_AT_MOST = 20

# A business key and a workflow id name an intent row; a provider's message id names the attempts
# an observation tied it to (every claim is written with one); an attempt reference names its attempt.
_FIND = """
SELECT business_key FROM (
    SELECT business_key, created_at FROM intents WHERE business_key = %(q)s OR workflow_id = %(q)s
    UNION
    SELECT i.business_key, i.created_at FROM observations o JOIN intents i ON i.workflow_id = o.workflow_id
     WHERE o.provider_id = %(q)s
    UNION
    SELECT i.business_key, i.created_at FROM attempts a JOIN intents i ON i.workflow_id = a.workflow_id
     WHERE a.attempt_ref = %(q)s) found
GROUP BY business_key ORDER BY max(created_at) DESC LIMIT %(limit)s
"""


async def find_business_keys(conn: AsyncConnection, identifier: str) -> list[str]:
    """The business keys of the notices `identifier` names (a business key, a workflow id, a
    provider message id or an attempt reference), newest first, at most FOUND_AT_MOST."""
    cursor = await conn.execute(_FIND, {"q": identifier, "limit": FOUND_AT_MOST})
    return [row[0] for row in await cursor.fetchall()]


class CountedDuplicate(Frozen):
    """An attempt Herald concluded the provider never took, that it had after all (migration 004)."""

    attempt_number: int
    cause: str  # submit_refused, provider_unreachable, lookup_not_found, events_absent
    provider: str
    presumed_at: datetime
    first_seen_at: datetime | None
    # A copy went out while a later attempt's did too: one of the report's "duplicates sent".
    sent_twice: bool


class SeenSuppression(Frozen):
    """Why the ledger suppresses the recipient on this channel: an opt-out refusal, a hard bounce, a complaint."""

    cause: str
    detail: str
    seen_at: datetime


class ChannelStory(Frozen):
    """One channel of a notice: its intent's history, where it stands, and what the ledger counted about it."""

    history: IntentHistory
    # The intent's newest transition (pending with none yet), as the view intent_current_state reads it.
    state: str
    state_since: datetime | None
    state_reason: str | None
    duplicates: list[CountedDuplicate] = []
    requests: list[RecordedRequest] = []
    suppressions: list[SeenSuppression] = []


class NoticeStory(Frozen):
    business_key: str
    channels: list[ChannelStory]


_DUPLICATES = """
SELECT attempt_number, cause, provider, presumed_at, first_seen_at, (copy_went_out AND later_copies > 0) AS sent_twice
  FROM presumed_not_accepted_then_seen WHERE workflow_id = %s ORDER BY attempt_number
"""
_SUPPRESSIONS = """
SELECT cause, detail, seen_at FROM suppression_evidence
 WHERE recipient_fingerprint = ANY(%s) AND channel = %s ORDER BY seen_at DESC LIMIT 20
"""
_CHANNELS = "SELECT workflow_id FROM intents WHERE business_key = %s ORDER BY channel"


async def notice_story(pool: AsyncConnectionPool, business_key: str) -> NoticeStory | None:
    """Every channel of the notice under `business_key`, in channel order; None when the ledger has none."""
    async with pool.connection() as conn:
        cursor = await conn.execute(_CHANNELS, (business_key,))
        workflow_ids = [row[0] for row in await cursor.fetchall()]
    if not workflow_ids:
        return None
    channels = []
    for workflow_id in workflow_ids:
        history = await intent_history(pool, workflow_id)
        if history is not None:  # the rows are append-only: one seen a moment ago is still there
            channels.append(await _channel_story(pool, history))
    return NoticeStory(business_key=business_key, channels=channels)


async def _channel_story(pool: AsyncConnectionPool, history: IntentHistory) -> ChannelStory:
    last = history.transitions[-1] if history.transitions else None
    fingerprints: Sequence[str] = [history.recipient_fingerprint] if history.recipient_fingerprint else []
    async with pool.connection() as conn:
        async with conn.cursor(row_factory=class_row(CountedDuplicate)) as cursor:
            await cursor.execute(_DUPLICATES, (history.workflow_id,))
            duplicates = await cursor.fetchall()
        requests = await requests_of(conn, fingerprints, history.channel) if fingerprints else []
        async with conn.cursor(row_factory=class_row(SeenSuppression)) as cursor:
            await cursor.execute(_SUPPRESSIONS, (list(fingerprints), history.channel))
            suppressions = await cursor.fetchall()
    return ChannelStory(
        history=history,
        state=last.to_state if last else "pending",
        state_since=last.at if last else None,
        state_reason=last.reason if last else None,
        duplicates=duplicates,
        requests=requests,
        suppressions=suppressions,
    )
