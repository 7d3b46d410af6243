"""The transactional outbox: a notice committed in the same transaction as the business change.

A service adds ``herald_outbox`` to its own database (``schema.sql``, applied by
``apply_schema``) and, inside the transaction that settles a payment or promotes a seat, calls
``enqueue(conn, notice)``. Both rows commit together or neither does: a crash after the commit
loses nothing (the relay starts the notice later), and a rollback sends nothing. The relay
(``herald.outbox.relay``, ``python -m herald.outbox``) claims rows and starts each notice through
the client, idempotently by business key.

    async with conn.transaction():
        await conn.execute("UPDATE payments SET settled = true WHERE id = %s", (payment_id,))
        await outbox.enqueue(conn, {"business_key": f"order_receipt:{payment_id}", "channels": [...]})
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from herald.intake.notice import NoticeRequest, parse_notice

CHANNEL = "herald_outbox"  # the LISTEN/NOTIFY channel the insert trigger notifies


async def enqueue(conn: AsyncConnection, notice: NoticeRequest | dict[str, Any]) -> int:
    """Insert `notice` into the outbox within the caller's open transaction; returns the row id.

    The notice is validated first (``InvalidIntent``, field and rule, never the value), so a bad
    notice fails the caller's transaction instead of being committed and refused later.
    """
    parsed = notice if isinstance(notice, NoticeRequest) else parse_notice(notice)
    cursor = await conn.execute(
        "INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s) RETURNING id",
        (parsed.business_key, Jsonb(stored_notice(parsed))),
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


def stored_notice(notice: NoticeRequest) -> dict[str, Any]:
    """The notice as its row holds it, and as the relay reads it back (``parse_notice``).

    Fields at their defaults are left out (the shared tenant, a priority not asked for): a notice
    that uses no newer field is written exactly as before, so a relay not yet upgraded still reads
    it; a relay refuses a field it does not know, and a refused row is never retried.
    """
    return notice.model_dump(mode="json", exclude_defaults=True)


def schema_sql() -> str:
    return (resources.files("herald.outbox") / "schema.sql").read_text(encoding="utf-8")


async def apply_schema(conn: AsyncConnection) -> None:
    """Create (or bring up to date) the outbox table in the service's database; idempotent."""
    await conn.execute(schema_sql())  # type: ignore[arg-type]
