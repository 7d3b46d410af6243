"""Applies the numbered ``migrations/NNN_name.sql`` files once each, in order.

Safe to run from every process at start: an advisory lock serialises runners
and ``schema_migrations`` remembers what was applied.
"""

from __future__ import annotations

import re
from importlib import resources

import psycopg

# Any constant works; it only has to be the same for every Herald process.
_MIGRATION_LOCK_ID = 0x4E52414C  # "HRAL"
_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


def migration_files() -> list[tuple[int, str, str]]:
    folder = resources.files("herald.ledger") / "migrations"
    found = []
    for item in folder.iterdir():
        match = _NAME.match(item.name)
        if match:
            found.append((int(match.group(1)), item.name, item.read_text(encoding="utf-8")))
    return sorted(found)


async def apply_migrations(conninfo: str) -> list[str]:
    """Apply every migration not yet applied; returns the names applied by this call."""
    applied: list[str] = []
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_ID,))
            await conn.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version    integer     PRIMARY KEY,
                       name       text        NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            cursor = await conn.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in await cursor.fetchall()}
            for version, name, sql in migration_files():
                if version in done:
                    continue
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
                )
                applied.append(name)
    return applied


def main() -> int:
    """`python -m herald.ledger.migrate`: apply pending migrations as the ledger's owner.

    The owner is HERALD_MIGRATION_DATABASE_URL (DATABASE_URL when unset, as on a single-role dev
    server); the services' own login may not run DDL (migration 012).
    """
    from herald.runtime import exits
    from herald.runtime.process import ProcessRuntime
    from herald.runtime.reach import reach_database
    from herald.settings import load_settings

    async def migrate() -> str:
        variable, url = ProcessRuntime(load_settings()).owner_database()
        # Checked first with a bounded connect: apply_migrations' own connection waits as long as
        # libpq lets it, and its error names no variable.
        await reach_database(url, variable)
        applied = await apply_migrations(url)
        return "applied: " + (", ".join(applied) if applied else "none (up to date)")

    return exits.run_job(migrate, database=None)


if __name__ == "__main__":
    raise SystemExit(main())
