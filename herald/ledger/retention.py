"""The inbox retention job: `python -m herald.ledger.retention --inbox-days 30`.

Run it daily (cron, a Kubernetes CronJob, a Temporal schedule). It replaces the raw payload of
every decided report older than the period with a marker and records the run in ledger_purges;
the reports themselves (status, error code, times, verdict) stay, and undecided reports keep their
payloads until they are decided. Safe to run twice or from two places: a purged payload is skipped.

The ledger refuses a period under 7 days (migration 015's floor: payloads are kept that long to
explain verdicts); the refusal is one line naming ``--inbox-days``, and nothing is purged.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg_pool import AsyncConnectionPool

from herald.errors import HeraldError
from herald.ledger.privacy import purge_inbox_payloads
from herald.runtime import exits
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.settings import load_settings

MAX_DAYS = 36_500


def _days(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 <= int(text) <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be a whole number of days from 0 to {MAX_DAYS}")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m herald.ledger.retention",
        description="Purge the raw payloads of decided reports older than the retention period; recorded in ledger_purges.",
        epilog="example:\n  python -m herald.ledger.retention --inbox-days 30 --operator nightly-cron",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--inbox-days", type=_days, required=True, help="keep raw report payloads this many days")
    parser.add_argument("--operator", default="retention-job", help="who runs it, as ledger_purges records it")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> str:
    runtime = ProcessRuntime(load_settings())
    # A job run from cron has no one watching its pool retry: one bounded try, then one line.
    async with runtime.pool(LEDGER, "required: the ledger whose inbox is purged") as pool:
        cut_off = await _ledger_now(pool) - timedelta(days=args.inbox_days)
        try:
            purge = await purge_inbox_payloads(
                pool, older_than=cut_off, operator=args.operator, reason=f"inbox retention: {args.inbox_days} days"
            )
        except psycopg.errors.InvalidParameterValue as error:
            # The retention floor (SQLSTATE 22023): the ledger's message is its own words, naming the rule.
            raise HeraldError(f"--inbox-days: {error.diag.message_primary}") from None
    return f"purged {purge.rows_affected} report payload(s) received before {cut_off:%Y-%m-%d %H:%M} UTC (ledger_purges id {purge.purge_id})"


async def _ledger_now(pool: AsyncConnectionPool) -> datetime:
    """The ledger's clock: received_at was written with it and the floor is measured on it, so a
    period of exactly 7 days is not refused because this host's clock runs a little ahead."""
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT now()")
        row = await cursor.fetchone()
    assert row is not None  # SELECT now() always returns one row
    return row[0].astimezone(UTC)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return exits.run_job(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
