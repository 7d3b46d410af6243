"""The outbox's backlog for the routes page: starter.py report's query, over a login that cannot read a notice.

The outbox lives in the services' database, not the ledger, and its ``notice`` column holds each
person's number or address and render data in clear. The console reads it only as a login granted
SELECT on ``herald_outbox (state, created_at)`` and nothing else (README, "The operator's console"):
the backlog's one query (``herald.outbox.relay.backlog``, the report's line) reads no other column.
A login that may read the notice, or write to the outbox at all (the relay's, pasted by mistake from
HERALD_OUTBOX_DATABASE_URL), is refused before its first reading, at start when the database answers
then, else on the first page that asks.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from herald.outbox.relay import Backlog, backlog
from herald.settings import InvalidSetting

VARIABLE = "HERALD_CONSOLE_OUTBOX_DATABASE_URL"
GRANT = "GRANT SELECT (state, created_at) ON herald_outbox TO <login>"
_MAY_READ_A_PERSON = "SELECT has_column_privilege('herald_outbox', 'notice', 'SELECT')"
_MAY_WRITE = (
    "SELECT has_table_privilege('herald_outbox', 'INSERT') OR has_table_privilege('herald_outbox', 'DELETE') "
    "OR has_any_column_privilege('herald_outbox', 'UPDATE')"
)


class OutboxBacklog:
    """The relay's backlog over the console's own outbox login, checked once before it is first read."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._checked = False

    async def check(self) -> None:
        """Refuse (InvalidSetting) a login that may read a notice or write to the outbox."""
        async with self._pool.connection() as conn:
            reads_people = (await (await conn.execute(_MAY_READ_A_PERSON)).fetchone())[0]  # type: ignore[index]
            writes = (await (await conn.execute(_MAY_WRITE)).fetchone())[0]  # type: ignore[index]
        if reads_people or writes:
            raise InvalidSetting(
                VARIABLE,
                f"must be a login that may read herald_outbox's state and created_at only ({GRANT}): "
                "this one may " + ("read the notices (a person's number and data)" if reads_people else "write to it"),
            )
        self._checked = True

    async def read(self) -> Backlog:
        if not self._checked:
            await self.check()
        return await backlog(self._pool)
