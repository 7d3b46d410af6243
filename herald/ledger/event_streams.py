"""The ESP event streams as the ledger records them: one mark per verified post, read per attempt.

The receipt server writes a mark in the transaction that stores a post's events; the workflow reads
the marks through a local activity when an unknown e-mail's evidence window closes, and
``herald.core.silence`` decides from what it read. Parameterised SQL only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from herald.core.silence import EventStream, EventStreamQuery

_RECORD_MARK = """
INSERT INTO event_stream_marks (provider, oldest_event_at, newest_event_at, newest_submission_at, events)
SELECT %(provider)s, %(oldest)s, %(newest)s,
       (SELECT max(prepared_at) FROM attempts WHERE attempt_ref = ANY(%(refs)s)), %(events)s
"""


async def record_mark(
    conn: AsyncConnection, *, provider: str, event_times: Sequence[datetime], attempt_refs: Sequence[str]
) -> None:
    """Record one verified post of `provider` (inside the transaction that stores its events).

    Only events that carry the ESP's own time count; a post without any leaves no mark.
    """
    if not event_times:
        return
    await conn.execute(
        _RECORD_MARK,
        {
            "provider": provider,
            "oldest": min(event_times),
            "newest": max(event_times),
            "refs": sorted(set(attempt_refs)),
            "events": len(event_times),
        },
    )


_READ = """
WITH esp AS (SELECT provider FROM attempts WHERE attempt_ref = %(ref)s AND provider IS NOT NULL)
SELECT esp.provider,
       (SELECT max(m.received_at) FROM event_stream_marks m WHERE m.provider = esp.provider),
       (SELECT min(m.received_at) FROM event_stream_marks m
         WHERE m.provider = esp.provider AND m.newest_submission_at >= %(passed_after)s
           AND m.received_at - m.newest_event_at <= %(lag)s),
       (SELECT min(m.received_at) FROM event_stream_marks m
         WHERE m.provider = esp.provider AND m.newest_event_at >= %(window_from)s
           AND m.oldest_event_at <= %(window_to)s AND m.received_at - m.newest_event_at > %(lag)s)
  FROM esp
"""


async def read(pool: AsyncConnectionPool, query: EventStreamQuery) -> EventStream:
    """The stream of the ESP that `query.attempt_ref` was handed to, as recorded now."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            _READ,
            {
                "ref": query.attempt_ref,
                "passed_after": query.passed_after,
                "window_from": query.window_from,
                "window_to": query.window_to,
                "lag": query.lag,
            },
        )
        row = await cursor.fetchone()
    if row is None:
        return EventStream(provider=None)
    provider, last_post_at, passed_at, interrupted_at = row
    return EventStream(provider=provider, last_post_at=last_post_at, passed_at=passed_at, interrupted_at=interrupted_at)
