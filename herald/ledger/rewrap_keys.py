"""Re-wrapping recipients' data keys under the active key-encryption key:
`python -m herald.ledger.rewrap_keys`.

Run it once after migration 020 (rows written before it hold their data key in the clear; until
re-wrapped, a copy of the ledger opens every sealed payload of those people), and after each KEK
rotation (rows wrapped under an older KEK; once none is left, that KEK can be removed). It runs as
the ledger's owner (HERALD_MIGRATION_DATABASE_URL, else DATABASE_URL): the services' login may not
update ``recipient_keys``. Each row is re-wrapped only if it still holds the generation read (an
erasure in between wins), so it is safe beside running services and safe to run twice.

What it cannot do: the clear key a row held before stays in the database's files (the old row
version until VACUUM reuses its space, the WAL until recycled, any base backup or WAL archive until
its retention ends): README, "PostgreSQL: ... retention and erasure".
"""

from __future__ import annotations

import argparse
import sys

import psycopg

from herald.key_encryption import KeyUnavailable, KeyWrapper
from herald.outcomes import Frozen
from herald.recipient_vault import KeyRow, wrap_context
from herald.runtime import exits
from herald.runtime.process import ProcessRuntime
from herald.runtime.reach import reach_database
from herald.settings import load_settings

_BATCH = 500

_STALE = """
SELECT recipient_fingerprint, key_id, data_key, wrapped_key, kek_id FROM recipient_keys
 WHERE (data_key IS NOT NULL OR kek_id <> %(active)s) AND recipient_fingerprint > %(after)s
 ORDER BY recipient_fingerprint LIMIT %(limit)s
"""
_REWRAP = """
UPDATE recipient_keys SET data_key = NULL, wrapped_key = %s, kek_id = %s
 WHERE recipient_fingerprint = %s AND key_id = %s
"""


class Rewrapped(Frozen):
    active_kek: str
    from_clear: int = 0
    from_other_keks: int = 0
    # Rows whose KEK this process does not hold: left as they are, by KEK id.
    unopened: dict[str, int] = {}


async def rewrap_keys(conn: psycopg.AsyncConnection, keks: KeyWrapper) -> Rewrapped:
    """Wrap every key held in the clear, or under a KEK other than the active one, under the active one."""
    clear, other, unopened = 0, 0, dict[str, int]()
    after = ""
    while True:
        async with conn.transaction():
            cursor = await conn.execute(_STALE, {"active": keks.active_id, "after": after, "limit": _BATCH})
            rows = await cursor.fetchall()
            for fingerprint, key_id, data_key, wrapped_key, kek_id in rows:
                row = KeyRow(key_id, None if data_key is None else bytes(data_key),
                             None if wrapped_key is None else bytes(wrapped_key), kek_id)  # fmt: skip
                try:
                    key = row.data_key or await keks.unwrap(str(kek_id), row.wrapped_key or b"", wrap_context(fingerprint, key_id))
                except KeyUnavailable:
                    unopened[str(kek_id)] = unopened.get(str(kek_id), 0) + 1
                    continue
                new_kek, wrapped = await keks.wrap(key, wrap_context(fingerprint, key_id))
                updated = await conn.execute(_REWRAP, (wrapped, new_kek, fingerprint, key_id))
                if updated.rowcount:
                    clear, other = (clear + 1, other) if row.data_key is not None else (clear, other + 1)
        if len(rows) < _BATCH:
            break
        after = rows[-1][0]
    return Rewrapped(active_kek=keks.active_id, from_clear=clear, from_other_keks=other, unopened=unopened)


async def run() -> str:
    runtime = ProcessRuntime(load_settings())
    variable, url = runtime.owner_database()
    keks = runtime.keks()
    await reach_database(url, variable)
    async with await psycopg.AsyncConnection.connect(url) as conn:
        done = await rewrap_keys(conn, keks)
    line = (
        f"re-wrapped {done.from_clear} data key(s) held in the clear and {done.from_other_keks} wrapped under "
        f"an older key-encryption key, under {done.active_kek}"
    )
    if done.unopened:
        held = ", ".join(f"{kek_id} ({count})" for kek_id, count in sorted(done.unopened.items()))
        line += f"; left as they are, their KEK not configured here: {held}"
    return line


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="python -m herald.ledger.rewrap_keys",
        description="Wrap every recipient data key under the active key-encryption key (after migration 020, "
        "after a KEK rotation). Runs as the ledger's owner.",
    ).parse_args(argv)
    return exits.run_job(run, database=None)


if __name__ == "__main__":
    sys.exit(main())
