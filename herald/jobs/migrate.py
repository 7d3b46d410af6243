"""`python -m herald.jobs.migrate`: apply the ledger's pending migrations (``herald.ledger.migrate``)."""

from __future__ import annotations

from herald.ledger.migrate import apply_migrations
from herald.runtime import exits
from herald.runtime.process import ProcessRuntime
from herald.runtime.reach import reach_database
from herald.settings import load_settings


def main() -> int:
    """`python -m herald.jobs.migrate`: apply pending migrations as the ledger's owner.

    The owner is HERALD_MIGRATION_DATABASE_URL (DATABASE_URL when unset, as on a single-role dev
    server); the services' own login may not run DDL (migration 012).
    """
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
