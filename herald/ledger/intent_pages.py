"""Intents a page at a time, newest first, for operators' lists: filtered, bounded, paged by keyset.

A page is the next `limit` intents created before a position (created_at, workflow_id) inside a
time range, walking the index of migration 022 backwards; never an OFFSET, which reads and throws
away every row before the page, so page 1,000 would cost what the first thousand pages cost. The
caller bounds the range and the limit (the console refuses a range or a page size beyond its rules):
a filter that matches little walks at most the range. Each intent's state is the ledger's view of
it (``intent_current_state``), not computed again here.
"""

from __future__ import annotations

from datetime import datetime

from psycopg import AsyncConnection
from psycopg.rows import class_row

from herald.core.outcomes import Frozen


class IntentFilter(Frozen):
    """Which intents: created in [since, until), and each field given equal to the intent's."""

    since: datetime
    until: datetime
    state: str | None = None
    channel: str | None = None
    template_id: str | None = None
    tenant: str | None = None
    category: str | None = None
    # A person, by every fingerprint they may have been written under (the caller computes them).
    recipient_fingerprints: tuple[str, ...] | None = None


class Position(Frozen):
    """Where a page ends: the next page starts strictly after (older than) this intent."""

    created_at: datetime
    workflow_id: str


class IntentLine(Frozen):
    workflow_id: str
    business_key: str
    channel: str
    template_id: str
    template_version: int
    tenant: str
    category: str | None
    created_at: datetime
    state: str
    state_since: datetime | None


_PAGE = """
SELECT s.workflow_id, s.business_key, s.channel, s.template_id, s.template_version, i.tenant, i.category,
       s.created_at, s.state, s.state_since
  FROM intent_current_state s JOIN intents i ON i.workflow_id = s.workflow_id
 WHERE s.created_at >= %(since)s AND s.created_at < %(until)s
   AND (%(after_at)s::timestamptz IS NULL OR (s.created_at, s.workflow_id) < (%(after_at)s, %(after_id)s::text))
   AND (%(state)s::text IS NULL OR s.state = %(state)s)
   AND (%(channel)s::text IS NULL OR s.channel = %(channel)s)
   AND (%(template_id)s::text IS NULL OR s.template_id = %(template_id)s)
   AND (%(tenant)s::text IS NULL OR i.tenant = %(tenant)s)
   AND (%(category)s::text IS NULL OR i.category = %(category)s)
   AND (%(fingerprints)s::text[] IS NULL OR i.recipient_fingerprint = ANY(%(fingerprints)s))
 ORDER BY s.created_at DESC, s.workflow_id DESC
 LIMIT %(limit)s
"""


async def intent_page(
    conn: AsyncConnection, chosen: IntentFilter, *, after: Position | None, limit: int
) -> tuple[list[IntentLine], Position | None]:
    """Up to `limit` intents matching `chosen` older than `after` (the newest when None), and the
    position the next page starts after (None when this page is the last)."""
    params = {
        "since": chosen.since, "until": chosen.until, "state": chosen.state, "channel": chosen.channel,
        "template_id": chosen.template_id, "tenant": chosen.tenant, "category": chosen.category,
        "fingerprints": list(chosen.recipient_fingerprints) if chosen.recipient_fingerprints is not None else None,
        "after_at": after.created_at if after else None, "after_id": after.workflow_id if after else None,
        # One more than asked: whether there is a next page, without counting.
        "limit": limit + 1,
    }  # fmt: skip
    async with conn.cursor(row_factory=class_row(IntentLine)) as cursor:
        await cursor.execute(_PAGE, params)
        lines = await cursor.fetchall()
    if len(lines) <= limit:
        return lines, None
    lines = lines[:limit]
    return lines, Position(created_at=lines[-1].created_at, workflow_id=lines[-1].workflow_id)
