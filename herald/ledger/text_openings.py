"""Sent texts opened by operators: one call records the opening and returns the text (migration 024).

``open_sent_text`` runs as a login of herald_text_opener, whose only grant is the ledger function of
the same name: it writes the opening row and returns the intent's body and subject in one statement,
and this returns them only once that transaction has committed. ``openings_of`` reads the record
back, as the console's read-only login (herald_reader may SELECT text_openings, no personal column).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg_pool import AsyncConnectionPool

from herald.core.outcomes import Frozen

# The ledger's bounds on what an opening records (024's CHECKs): the console refuses beyond them first.
REASON_MAX = 500
OPERATOR_MAX = 200
# The openings a story lists per notice, newest kept: a page stays bounded however often it was opened.
OPENINGS_LISTED = 200


class OpeningOutcome(StrEnum):
    OPENED = "opened"  # the text was returned
    ERASED = "erased"  # the person was erased: nothing to return
    REFUSED = "refused"  # no intent has that workflow id


class SentText(Frozen):
    """What one opening gave: its record, and the text when the outcome is ``opened``."""

    opening_id: int
    outcome: OpeningOutcome
    opened_at: datetime
    channel: str | None
    body: str | None
    subject: str | None


class RecordedOpening(Frozen):
    workflow_id: str
    operator: str
    reason: str
    outcome: OpeningOutcome
    opened_at: datetime


async def open_sent_text(pool: AsyncConnectionPool, *, workflow_id: str, operator: str, reason: str) -> SentText:
    """The text `workflow_id` sent, after its opening (by `operator`, for `reason`) is committed;
    a ledger that refuses the row raises, and nothing is returned."""
    async with pool.connection() as conn:
        async with conn.transaction():
            cursor = await conn.execute(
                "SELECT * FROM open_sent_text(%s, %s, %s)", (workflow_id, operator, reason)
            )
            row = await cursor.fetchone()
        # Here the transaction has committed: the row is in the ledger before the text is anyone's.
    assert row is not None  # the function always returns one row
    opening_id, outcome, opened_at, channel, body, subject = row
    return SentText(opening_id=opening_id, outcome=OpeningOutcome(outcome), opened_at=opened_at, channel=channel,
                    body=body, subject=subject)  # fmt: skip


_OPENINGS = """
SELECT workflow_id, operator, reason, outcome, opened_at FROM (
    SELECT workflow_id, operator, reason, outcome, opened_at, id
      FROM text_openings WHERE workflow_id = ANY(%s)
     ORDER BY opened_at DESC, id DESC LIMIT %s) newest
 ORDER BY opened_at, id
"""


async def openings_of(conn: AsyncConnection, workflow_ids: list[str]) -> list[RecordedOpening]:
    """The openings of these workflows' texts, oldest first (the newest OPENINGS_LISTED of them)."""
    async with conn.cursor(row_factory=class_row(RecordedOpening)) as cursor:
        await cursor.execute(_OPENINGS, (workflow_ids, OPENINGS_LISTED))
        return await cursor.fetchall()
