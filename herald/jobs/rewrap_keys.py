"""`python -m herald.jobs.rewrap_keys`: wrap every recipient data key under the active key-encryption
key, as the ledger's owner (``herald.ledger.rewrap_keys`` says when and why)."""

from __future__ import annotations

import argparse
import sys

import psycopg

from herald.ledger.rewrap_keys import rewrap_keys
from herald.runtime import exits
from herald.runtime.process import ProcessRuntime
from herald.runtime.reach import reach_database
from herald.settings import load_settings


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
        prog="python -m herald.jobs.rewrap_keys",
        description="Wrap every recipient data key under the active key-encryption key (after migration 020, "
        "after a KEK rotation). Runs as the ledger's owner.",
    ).parse_args(argv)
    return exits.run_job(run, database=None)


if __name__ == "__main__":
    sys.exit(main())
